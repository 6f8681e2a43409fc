"""Benchmarks: side-by-side measurements of wedgewatch parts (``wedgewatch bench ...``)."""
