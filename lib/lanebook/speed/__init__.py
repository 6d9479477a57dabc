"""Speed bands: an exact, cheap streaming harness (per-stream decode, wall aggregate, TTFT and acceptance, defined in metrics).

records/client (on transport, a lean httpx transport that stamps every socket read with the kernel's
receive time) do the I/O, metrics are pure functions of the records, workloads are prompt sets kept
beside the code, bands turn trials into medians, min-max bands and verdicts (baselines/ holds lanes'
stored bands), command is `lanebook speed` and run_speed.
"""
