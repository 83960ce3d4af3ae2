"""Capacity planning (`batchsim plan`, docs/design.md §9): questions answered by many simulated
runs.

Every configuration the plan evaluates is an ordinary run of the experiment file with
`--set`-style overrides (the sweep machinery's `RunTask`), in its own folder under the plan's
output folder, so a plan resumes and runs on any executor. On top of the runs:

- `verdict`: whether one configuration meets the SLO (percentiles counting rejected requests as
  misses, the upper end of the 95% interval with replications, and a growing-queue test);
- `bisect`: the largest load that meets it; `candidates`: the cheapest configuration that meets
  it at a target load; `pareto`: tokens/s per GPU against tokens/s per user;
- `planner`: every search of every variant (base and what-ifs), round by round.
"""
