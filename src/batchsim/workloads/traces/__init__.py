"""Trace file formats beyond Azure 2023, one parser per module; ``trace_formats`` registers them."""
