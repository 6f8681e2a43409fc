"""The ground every part stands on: the vocabulary, the exception tree, the typed events,
the clock, the seams, redaction, the extras table and the one registry lookup. It imports no part."""
