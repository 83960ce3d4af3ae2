"""`batchsim calibrate engine`: fit an engine profile's costs to measured serving benchmarks."""
