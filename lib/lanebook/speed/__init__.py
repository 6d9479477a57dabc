"""Speed bands: an exact, cheap streaming harness (per-stream decode, wall aggregate, TTFT and acceptance, defined in
metrics).

records/client (on transport, a lean httpx transport that stamps every socket read with the kernel's
receive time) do the I/O, metrics are pure functions of the records, workloads are prompt sets kept
beside the code, bands turn trials into medians, min-max bands and verdicts, command is `lanebook speed`
and run_speed. For the speed runbook: provenance is the setup a run was measured on and the rule that
says whether two setups are the same, baseline the lanes' stored baselines (baselines/LANE.json), the
workloads a lane runs and the judgement of a run against its baseline, lanespeed a lane's plan (levels,
trials, what a dry run would send), plots one workload's bands as a PNG.
"""
