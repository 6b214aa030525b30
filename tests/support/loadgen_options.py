"""The load generator's options as its command line would parse them, for tests that build options
without argparse."""

from __future__ import annotations

import argparse

from leakwatch.loadgen.options import OPTIONS, dest


def parsed(**overrides) -> argparse.Namespace:
    values = {dest(flag): default for flag, _, default, _, _ in OPTIONS}
    values.update({k.replace("-", "_"): v for k, v in overrides.items()})
    return argparse.Namespace(**values)
