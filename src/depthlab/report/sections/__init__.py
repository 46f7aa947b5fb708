"""The report's sections: every module here is imported when a report is built and registers its sections
with ``@depthlab.report.html.section``. Add a file to add a section (see ``depthlab.report.html``)."""
