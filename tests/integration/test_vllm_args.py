"""Every profile's rendered vLLM arguments, parsed by vLLM's own server parser (the installed
release, the one config/stack.yaml pins), so a misspelt, renamed or removed flag fails here and
not on a rented GPU."""

from __future__ import annotations

import pytest

from leakwatch.core import profiles
from leakwatch.core.errors import LeakwatchError


@pytest.fixture(scope="module")
def vllm_parser():
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))


def parse(parser, argv: list[str]):
    """Parses like the server does; argparse's exit on a bad flag becomes an exception."""
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    # argparse accepts unambiguous prefixes (allow_abbrev), so a truncated flag would still parse
    # here and in vLLM; require every flag we render to be one vLLM defines exactly.
    known = set(parser._option_string_actions)
    unknown = [a for a in argv if a.startswith("--") and a.split("=")[0] not in known]
    if unknown:
        raise LeakwatchError(f"vLLM has no flag {unknown[0]}")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        raise LeakwatchError(f"vLLM's parser rejected {argv} (exit {exc.code})") from None
    validate_parsed_serve_args(args)
    # --quantization is free text at parse time; vLLM checks it against this list when it starts.
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    if args.quantization is not None and args.quantization not in QUANTIZATION_METHODS:
        raise LeakwatchError(f"vLLM knows no quantization {args.quantization!r}")
    return args


def rendered(profile: profiles.Profile) -> list[str]:
    return profiles.vllm_engine_args(profile, profiles.model_path(profile, "/models")) + [
        "--host",
        "127.0.0.1",
        "--port",
        "8000",
    ]


@pytest.mark.parametrize("name", profiles.available())
def test_vllm_parses_every_profile(vllm_parser, name):
    profile = profiles.load(name)
    args = parse(vllm_parser, rendered(profile))
    v = profile.vllm
    assert args.max_model_len == v["max_model_len"]
    assert args.max_num_seqs == v["max_num_seqs"]
    assert args.max_num_batched_tokens == v["max_num_batched_tokens"]
    assert args.tensor_parallel_size == v["tensor_parallel_size"]
    assert args.quantization == v["quantization"]
    assert args.trust_remote_code is v["trust_remote_code"]
    assert args.enable_chunked_prefill is v["enable_chunked_prefill"]
    assert args.enable_prefix_caching is v["enable_prefix_caching"]
    assert args.served_model_name == [profile.served_name]
    assert (args.override_generation_config or {}) == profile.generation
    if v["gpu_memory_utilization"] is not None:
        assert args.gpu_memory_utilization == pytest.approx(v["gpu_memory_utilization"])
    # The parsed namespace builds vLLM's engine arguments, as the server's next step does.
    from vllm.engine.arg_utils import AsyncEngineArgs

    engine = AsyncEngineArgs.from_cli_args(args)
    assert engine.model == profiles.model_path(profile, "/models")


@pytest.mark.parametrize(
    "bad, message",
    [
        (["--max-model-length", "2048"], "no flag --max-model-length"),  # misspelt
        (["--enable-chunked-prefil"], "no flag --enable-chunked-prefil"),  # truncated (argparse would accept it)
        (["--use-v2-block-manager"], "no flag --use-v2-block-manager"),  # removed from vLLM
        (["--quantization", "fp7"], "knows no quantization 'fp7'"),  # not a method vLLM has
        (["--kv-cache-dtype", "fp7"], "parser rejected"),  # not a valid choice
        (["--max-num-seqs", "many"], "parser rejected"),  # wrong type
    ],
)
def test_a_bad_flag_fails(vllm_parser, bad, message):
    argv = rendered(profiles.load("demo")) + bad
    with pytest.raises(LeakwatchError, match=message):
        parse(vllm_parser, argv)
