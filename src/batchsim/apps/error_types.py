"""Whether an exception is one of a list of classes, named so that asking imports nothing.

The command line turns a user's errors into one line; importing every module that defines one
would load pandas, scipy and the simulator before even `--help` is shown. An error whose
module was never imported cannot have been raised, so only the loaded ones are asked.
"""

from __future__ import annotations

import sys

ClassNames = tuple[tuple[str, str], ...]  # (module, class)


def is_one_of(err: BaseException, names: ClassNames) -> bool:
    """Whether `err` is an instance of one of the named classes (those imported so far)."""
    for module_name, class_name in names:
        module = sys.modules.get(module_name)
        if module is not None and isinstance(err, getattr(module, class_name)):
            return True
    return False
