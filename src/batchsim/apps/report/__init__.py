"""The HTML report of a results folder (docs/design.md §8): comparison table and plots per arm.

`batchsim.report.build.write_report` is the entry point. This package file imports nothing,
so the CLI can catch `batchsim.report.results.ReportError` without loading matplotlib.
"""
