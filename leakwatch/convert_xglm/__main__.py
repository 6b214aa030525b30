"""`python -m leakwatch.convert_xglm SRC DST`: what compose's one-shot `janeway-convert` runs inside
the vLLM image, which has torch, safetensors and huggingface_hub but not leakwatch's own
dependencies (so this avoids leakwatch.cli)."""

import argparse
import sys

from ..core.errors import LeakwatchError
from . import __doc__ as DOC
from .command import add_arguments, run

parser = argparse.ArgumentParser(prog="python -m leakwatch.convert_xglm", description=DOC)
add_arguments(parser)
try:
    sys.exit(run(parser.parse_args()))
except LeakwatchError as exc:
    print(f"convert-xglm: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
