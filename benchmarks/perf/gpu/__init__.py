"""The checks of benchmarks/perf/gpu_check.py, one module per group of CUDA code paths.

common: the shared setup (synthetic splits, fit() as the train stage runs it, helpers);
precision: AMP / GradScaler, channels_last, fused AdamW, torch.compile; placement: device
and pinned-RAM resident data; monitoring: NVML sampling and the step profile; ddp: DDP over
nccl at world size 1; scoring: batched vs per-file evaluation; report: running one check,
the machine facts and the JSON. leakpipe is imported inside the checks, so a broken module
fails only the checks that use it.
"""
