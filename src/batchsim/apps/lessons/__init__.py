"""The lessons gallery (docs/lessons/): each lesson is a shipped experiment, the figure and the
numbers drawn from what it writes, and the claim it demonstrates, checked.

`python -m batchsim.apps.lessons [NAME...]` reruns lessons and rewrites their figures and the
generated part of their pages; the tests check every claim on a shortened run and that each
page's numbers and figure come from the same run.
"""
