"""Rewrite an XGLM checkpoint (e.g. KoboldAI/fairseq-dense-13B-Janeway) as OPTForCausalLM for vLLM.

SRC is a local folder or a Hugging Face repo id (downloaded into the Hugging Face cache). DST gets
safetensors shards, an OPT config.json, the source's tokenizer files and a manifest. The run is
idempotent: a DST that verifies against its manifest (same source, every file's size and sha256)
is kept as is. It is atomic: DST appears only when complete. A DST that does not verify (an
interrupted copy, hand edits, another source) is refused unless --force replaces it.
See docs/janeway.md for the arithmetic and the parity tests.
"""
