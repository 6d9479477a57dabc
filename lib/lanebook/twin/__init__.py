"""The digital twin: sshd nodes on loopback (a pair, and more as lanes name them), stand-ins for what cannot run here,
and a vLLM-compatible server."""
