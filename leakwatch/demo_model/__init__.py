"""`leakwatch demo-model`: the offline demo model (a byte-level BPE tokenizer and a tiny random Llama)."""
