"""`batchsim replay`: simulate measured serving benchmarks case by case and say how wrong we are."""
