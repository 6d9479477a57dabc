"""The digital twin: two sshd nodes on loopback, stand-ins for what cannot run here, and a vLLM-compatible server."""
