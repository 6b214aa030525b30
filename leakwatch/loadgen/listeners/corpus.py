"""Corpus preparation: probes the server, picks the model and its client conventions, builds the prompts."""

from __future__ import annotations

import logging
import time

from .. import conventions, tokens
from ..corpus_builder import CorpusBuilder
from ..options import OptionError
from ..prompt_record import Prompt, load_prompts_file


class PromptCycle:
    """The prompts of one workload, used in turn (the same order in every run with the same seed)."""

    def __init__(self, prompts: list[Prompt]):
        self.prompts = prompts
        self.index = 0

    def next(self) -> Prompt:
        prompt = self.prompts[self.index % len(self.prompts)]
        self.index += 1
        return prompt


class ConventionCounter:
    """Counts a prompt's tokens as the model will see it (with the model's newline token)."""

    def __init__(self, counter, rules: conventions.ClientConventions):
        self.counter = counter
        self.rules = rules
        self.exact = counter.exact
        self.description = counter.description

    def count(self, content) -> int:
        return self.counter.count(self.rules.prompt(content))


class CorpusPreparation:
    """On test start (workers and a local runner): the server's models, the conventions, the corpora."""

    def __init__(self, run):
        self.run = run
        self._prepared_for = None
        if run.role != "master":
            run.env.events.test_start.add_listener(self.on_test_start)

    def on_test_start(self, environment, **kwargs) -> None:
        run = self.run
        if run.options is None:
            return
        try:
            self.prepare()
        except OptionError as exc:
            logging.getLogger("leakwatch.loadgen").error("%s", exc)
            environment.runner.quit()

    def prepare(self) -> None:
        run, opts = self.run, self.run.options
        key = (
            run.host,
            opts.model,
            opts.api,
            opts.seed,
            opts.prompt_scales,
            opts.output_scales,
            opts.corpus_size,
            opts.prompts_file,
            opts.tokenizer,
            opts.max_output_tokens,
            opts.client_profile,
            run.share,
        )
        if key == self._prepared_for:
            return  # a second test in the same web UI session reuses the corpora
        run.notes = []
        try:
            run.server = tokens.probe(run.host, run.api_key(run.host), timeout=opts.connect_timeout)
        except tokens.ServerUnavailable as exc:
            run.server = None
            run.note(
                f"cannot read the served models ({exc}); requests will fail until the server answers", logging.ERROR
            )
        served = run.server.models if run.server else ()
        run.model = opts.model or (served[0] if served else "default")
        if served and run.model not in served:
            run.note(
                f"model {run.model!r} is not served by {run.host} (it serves: {', '.join(served)}); "
                f"requests will fail with http_404 - fix --model",
                logging.ERROR,
            )
        try:
            run.conventions = conventions.resolve(opts.client_profile, run.model)
        except Exception as exc:  # noqa: BLE001 - profiles.load names what is wrong
            raise OptionError(f"--client-profile: {exc}") from None
        run.conventions_info = run.conventions.describe()
        if run.conventions.profile is not None:
            run.note(f"client conventions of profile {run.conventions.name}: {run.conventions.describe()}")
        max_len = run.server.max_model_len if run.server else None
        if opts.prompts_file:
            try:
                prompts = load_prompts_file(opts.prompts_file, opts.api)
            except (OSError, ValueError) as exc:
                raise OptionError(f"--prompts-file: {exc}") from None
            cycle = PromptCycle(prompts)
            run.corpora = {name: cycle for name in opts.workloads}
            run.note(f"prompts: {len(prompts)} from {opts.prompts_file}")
        else:
            counter = ConventionCounter(self._token_counter(), run.conventions)
            run.corpora = {}
            for name in self._workloads_in_use():

                def builder(counter, name=name):
                    return CorpusBuilder(
                        opts.workload_spec(name),
                        counter,
                        api=opts.api,
                        seed=opts.seed * 1000 + run.share[0],
                        scale=opts.prompt_scale(name),
                        output_scale=opts.output_scale(name),
                        max_model_len=max_len,
                        max_output_tokens=opts.max_output_tokens or None,
                    )

                started = time.monotonic()
                build = builder(counter)
                try:
                    prompts = build.build(opts.corpus_size)
                except tokens.ServerUnavailable as exc:
                    run.note(f"the tokenizer stopped answering ({exc}); prompt lengths are estimated", logging.ERROR)
                    counter = ConventionCounter(tokens.EstimatedTokenizer(), run.conventions)
                    build = builder(counter)
                    prompts = build.build(opts.corpus_size)
                run.corpora[name] = PromptCycle(prompts)
                run.note(
                    build.stats.summary(name, counter, max_len)
                    + f", input {opts.workload_spec(name).input.describe(opts.prompt_scale(name))}"
                    + f", built in {time.monotonic() - started:.1f} s"
                )
        self._prepared_for = key

    def _workloads_in_use(self) -> list[str]:
        opts = self.run.options
        names = {getattr(cls, "workload", None) for cls in self.run.env.user_classes}
        return sorted(n for n in names if n in opts.workloads) or sorted(opts.workloads)

    def _token_counter(self):
        run, opts = self.run, self.run.options
        if opts.tokenizer == "estimate":
            return tokens.EstimatedTokenizer()
        if opts.tokenizer != "server":
            try:
                return tokens.LocalTokenizer(opts.tokenizer)
            except Exception as exc:  # noqa: BLE001 - transformers raises many kinds for a bad folder
                raise OptionError(f"--tokenizer: cannot load a tokenizer from {opts.tokenizer!r} ({exc})") from None
        if run.server is None:
            run.note("no server to measure prompt lengths with: they are estimated", logging.WARNING)
            return tokens.EstimatedTokenizer()
        return tokens.ServerTokenizer(run.host, run.model, run.api_key(run.host), timeout=opts.request_timeout)
