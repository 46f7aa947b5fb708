"""Seed 004: how induction works with finite capacity, measured on any causal language model.

``sequences`` (the essay's protocol: induction sequences, shuffled controls, stable log odds), ``measure``
(induction strength, A/B power, bleeding), ``study`` (all of them on one model, summary), ``model`` (the
``LogitModel`` interface and depthlab runs), ``tl`` (TransformerLens models; the only module that imports it),
``export`` (a run as a TransformerLens state dict), ``reproduce`` (the preset's measurements) and ``tables``.
The figures are ``depthlab.draw.induction``; the commands ``depthlab.cli.induction``.
"""
