"""Where the development slice of the public serving benchmarks lives.

A module of its own, importing nothing, so that the command line can name it in its help
without loading pandas.
"""

DEV_DATA = "serving_benchmarks_dev.csv"
"""The development slice of the public benchmarks: the only data the replay table may come from."""
DEV_DATA_PATH = f"../shared/data/serving/{DEV_DATA}"
