"""torch microbenchmarks of the operators the roofline prices (`pip install batchsim[calibrate]`).

torch is imported inside the functions that need it, so batchsim imports and runs without it.
"""
