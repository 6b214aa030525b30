"""`leakwatch stack`: start, stop and inspect the stack, through Docker Compose (compose_runner, with
local_images for machines that cannot pull and engine_mounts checked first) or natively (leakwatch.native)."""
