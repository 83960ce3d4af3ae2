"""The HTML report of a results folder (docs/design.md §8): comparison table and plots per arm.

`build.write_report` draws a folder's report; `rebuild.rebuild_report` is `batchsim report DIR`
(under the folder's lock, moved in atomically). This package file imports nothing,
so the CLI can catch `batchsim.report.results.ReportError` without loading matplotlib.
"""
