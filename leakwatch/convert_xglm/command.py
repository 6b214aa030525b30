"""`leakwatch convert-xglm SRC DST` (and `python -m leakwatch.convert_xglm`): its arguments and run."""

from __future__ import annotations

from pathlib import Path

from .conversion import DEFAULT_SHARD_SIZE, DTYPES, convert, parse_size


def add_arguments(parser) -> None:
    parser.add_argument("src", help="XGLM checkpoint: a local folder or a Hugging Face repo id")
    parser.add_argument("dst", type=Path, help="folder to write the OPT checkpoint to")
    parser.add_argument("--revision", help="branch, tag or commit of a Hub SRC (default: main)")
    parser.add_argument(
        "--dtype", choices=DTYPES, default="auto", help="dtype of the written weights (auto: the source's)"
    )
    parser.add_argument(
        "--max-shard-size", default=DEFAULT_SHARD_SIZE, help="largest safetensors file (default %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="replace a DST that does not verify")
    parser.add_argument(
        "--quick-verify",
        action="store_true",
        help="check an existing DST by file sizes only, not sha256 (seconds instead of a full read)",
    )


def run(args) -> int:
    convert(
        args.src,
        args.dst,
        revision=args.revision,
        dtype=args.dtype,
        max_shard_bytes=parse_size(args.max_shard_size),
        force=args.force,
        full_verify=not args.quick_verify,
    )
    return 0
