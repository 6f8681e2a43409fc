"""Forensics on other harnesses' result files: the signature of a client timeout scored as a
model failure (see ``report`` for the evidence, ``clusters`` for the duration test)."""

from wedgewatch.analysis.scan.report import render_text, scan

__all__ = ["render_text", "scan"]
