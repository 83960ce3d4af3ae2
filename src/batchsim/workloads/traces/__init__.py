"""Trace files: one parser module per format, the registry of formats, replay and transforms."""
