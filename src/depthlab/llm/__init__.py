"""Seed 002 §4: the retrieval problem asked of language models (prompts, runners, benchmark).

:mod:`~depthlab.llm.prompts` generates the five formulations of Appendix A, :mod:`~depthlab.llm.runners`
asks a local Hugging Face model or an OpenAI-compatible endpoint, :mod:`~depthlab.llm.bench` runs the
seed's protocol into the store; ``depthlab.cli.llm`` adds ``llm-prompts`` and ``llm-bench``, and
``depthlab.draw.llm`` draws the benchmark's figure.
Importing this package needs neither ``transformers`` nor ``torch``.
"""
