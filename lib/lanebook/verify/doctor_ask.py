"""A model's reading: `lanebook doctor --ask API` sends the doctor's folded evidence, the registry's causes and the
case base's nearest reports to an OpenAI-compatible endpoint the operator names (a lane of theirs, such as the
rollback lane, or any URL ending in /v1) and shows its answer beside the findings.

The reading is never a finding and never confirmed: the doctor's findings and exit code stay as they were. The
endpoint is keyed like a lane (a lane's `auth:`, or a key file of mode 0600 or an environment variable for a URL);
every key read is registered with the redactor, and the prompt is redacted before it is sent (a token in the pasted
logs never leaves). The prompt and the reply are recorded, redacted, in
outputs/doctor/UTCSTAMP-ask-ID.json; the doctor's JSON names that file and the prompt's sha256.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from lanebook.base import paths
from lanebook.base.errors import LanebookError
from lanebook.base.files import record_id, utc_stamp, write_atomic
from lanebook.base.redact import redact, redact_data
from lanebook.recipe.casebase import cases
from lanebook.recipe.casebase import causes as case_causes
from lanebook.recipe.pitfalls import SYMPTOMS
from lanebook.recipe.symptoms import NOTE
from lanebook.verify.doctor import Diagnosis
from lanebook.verify.doctor_cases import case_index

MAX_EVIDENCE_CHARS = 12_000  # of the folded evidence the prompt carries
NEAREST = 5  # case-base reports the prompt shows
MAX_TOKENS = 1024
# Characters per token assumed when fitting a prompt to an endpoint's context: log lines (numbers, paths, hex)
# tokenize at about 2-3 characters a token in common BPE vocabularies, so 2 leaves room rather than overflowing.
CHARS_PER_TOKEN = 2
CONTEXT_MARGIN_TOKENS = 64  # the chat template's own tokens around the messages
FIT_TRIES = 3  # prompts sent while the endpoint says the last one outgrew its context, each with half the room
SYSTEM = (
    "You help an operator diagnose a sick vLLM serving lane (DGX Spark pairs, tensor parallel across nodes). You get "
    "the evidence the lane showed (log lines and the operator's words, folded), the known causes (id: title - what "
    "it means), the public reports most like this evidence, and what lanebook's doctor found. Answer in at most ten "
    "lines: the most likely cause (a known id, or say it is none of them), why (quote the telling line), the fix, and "
    "what to check to be sure. Your reading is shown as a model's reading, never as a confirmed finding."
)


@dataclass(frozen=True)
class ModelReading:
    """The answer of the endpoint asked: where, which model, the prompt's sha256, the reply (or what failed) and the
    record holding the whole prompt and reply."""

    api: str
    model: str
    prompt_sha256: str
    reply: str
    record: str
    error: str = ""
    fitted: str = ""  # what was left out to fit the endpoint's context, in words; empty when nothing was

    def to_json(self) -> dict:
        found = {
            "api": self.api,
            "model": self.model,
            "prompt_sha256": self.prompt_sha256,
            "reply": self.reply,
            "record": self.record,
        }
        return found | ({"error": self.error} if self.error else {}) | ({"fitted": self.fitted} if self.fitted else {})


def endpoint(target: str, *, key_file: Optional[str] = None, key_env: Optional[str] = None) -> str:
    """The API base (ending in /v1) of TARGET: a lane's name (its `api:` and keys, as a run reads them) or a URL;
    a URL's key comes from KEY_FILE or KEY_ENV. Bad input is one LanebookError line."""
    from lanebook.lane.keys import endpoint_key, lane_keys

    if target.startswith(("http://", "https://")):
        api = target.rstrip("/")
        if not api.endswith("/v1"):
            raise LanebookError(f"--ask {target}: an OpenAI-compatible base URL ends in /v1")
        endpoint_key(api, key_file=key_file, key_env=key_env)
        return api
    if key_file or key_env:
        raise LanebookError("--ask-key-file/--ask-key-env go with --ask URL; a lane's key is where its auth: says")
    from lanebook.lane.params import load_lane

    params = load_lane(target)
    lane_keys(params)
    return params.api.rstrip("/")


def cause_rows() -> list[str]:
    """The registry's fault classes and the case base's case-only causes, one line each."""
    rows = [f"{s.id}: {s.title} - {s.cause}" for s in SYMPTOMS if s.kind != NOTE]
    rows += [f"{c.key}: {c.title} - {c.meaning}" for c in case_causes() if not c.id]
    return rows


def nearest_rows(evidence: str) -> list[str]:
    """The case-base reports nearest the evidence, nearest first: id, cause, thread, what was said, five lines."""
    by_id = {c.id: c for c in cases()}
    shown = []
    for vote in case_index().vote(evidence, k=NEAREST):
        for similar in vote.similar:
            case = by_id[similar.id]
            lines = "\n".join(f"    {t}" for t in (case.lines + case.kernel)[:5])
            words = "; ".join(case.words[:3])
            shown.append(
                f"- {case.id} (cause {case.cause}, similarity {similar.score}) {case.url}\n  said: {words}\n{lines}"
            )
    return shown


def findings_text(diagnosis: Diagnosis) -> str:
    rows = [f"- {f.id} {f.confidence}: {f.title}" for f in diagnosis.findings]
    rows += [f"- {n.id} note: {n.title}" for n in diagnosis.notes]
    return "\n".join(rows) or "- no finding"


@dataclass(frozen=True)
class Prompt:
    """What a prompt is made of, gathered once (retrieval included): the folded evidence, the known causes, the
    nearest reports and the doctor's findings; `messages` fits them to a budget as often as asked."""

    evidence: str
    causes: tuple[str, ...]
    nearest: tuple[str, ...]
    found: str
    named: tuple[str, ...]


def prompt(evidence: str, diagnosis: Diagnosis) -> Prompt:
    return Prompt(
        evidence[:MAX_EVIDENCE_CHARS],
        tuple(cause_rows()),
        tuple(nearest_rows(evidence)),
        findings_text(diagnosis),
        tuple(f.id for f in diagnosis.findings),
    )


def messages(parts: Prompt, *, budget_chars: Optional[int] = None) -> tuple[list[dict], str]:
    """The system and user messages, and what was left out to fit BUDGET_CHARS (empty when nothing was; see `fit`)."""
    kept, left_out = fit(
        parts.evidence, parts.causes, parts.nearest, parts.found, parts.named, budget_chars=budget_chars
    )
    body = (
        f"Evidence (folded):\n{kept[0]}\n\nKnown causes:\n{kept[1]}\n\n"
        f"Public reports most like this evidence:\n{kept[2] or '(none near enough)'}\n\n"
        f"What lanebook's doctor found:\n{parts.found}"
    )
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": body}], left_out


def fit(
    evidence: str,
    causes: Sequence[str],
    nearest: Sequence[str],
    found: str,
    named: Sequence[str],
    *,
    budget_chars: Optional[int] = None,
) -> tuple[tuple[str, str, str], str]:
    """The prompt's evidence, causes and nearest reports within BUDGET_CHARS (None: all of them), and what was left
    out, in words. The doctor's findings always go; the evidence keeps its start, up to half the room; the nearest
    reports come next, nearest first; the causes fill the rest, those the findings name first. Pure."""
    if budget_chars is None:
        return (evidence, "\n".join(causes), "\n".join(nearest)), ""
    room = max(0, budget_chars - len(SYSTEM) - len(found) - 200)  # the headings and the findings
    kept_evidence = evidence[: max(room // 2, 0)]
    room -= len(kept_evidence)
    kept_nearest: list[str] = []
    for row in nearest:
        if len(row) + 1 > room // 2:
            break
        kept_nearest.append(row)
        room -= len(row) + 1
    first = [row for row in causes if row.split(":", 1)[0] in named]
    kept_causes: list[str] = []
    for row in first + [row for row in causes if row not in first]:
        if len(row) + 1 > room:
            continue
        kept_causes.append(row)
        room -= len(row) + 1
    kept_causes.sort(key=list(causes).index)
    said = []
    if len(kept_evidence) < len(evidence):
        said.append(f"the evidence cut to its first {len(kept_evidence):,} of {len(evidence):,} characters")
    if len(kept_nearest) < len(nearest):
        said.append(f"{len(kept_nearest)} of {len(nearest)} similar reports")
    if len(kept_causes) < len(causes):
        said.append(f"{len(kept_causes)} of {len(causes)} known causes")
    return (kept_evidence, "\n".join(kept_causes), "\n".join(kept_nearest)), "; ".join(said)


def context_budget_chars(max_model_len: Optional[int], max_tokens: int) -> Optional[int]:
    """The prompt's room in characters on an endpoint serving MAX_MODEL_LEN tokens (None: not said, no limit)."""
    if not max_model_len:
        return None
    return max(0, (int(max_model_len) - max_tokens - CONTEXT_MARGIN_TOKENS) * CHARS_PER_TOKEN)


def ask(
    api: str,
    evidence: str,
    diagnosis: Diagnosis,
    *,
    model: Optional[str] = None,
    max_tokens: int = MAX_TOKENS,
    timeout_s: float = 300.0,
    outputs: Optional[Path] = None,
) -> ModelReading:
    """Ask API's model (MODEL, else the first /v1/models lists; at most MAX_TOKENS in its answer) for its reading,
    record prompt and reply (redacted) and return it. The prompt is fitted to the context the endpoint says it serves
    (`max_model_len` in /v1/models, as vLLM lists it), saying what it left out. A failed request is a reading with
    `error` set, recorded too: the findings stand without it."""
    from lanebook.nodes.http import request_json

    parts = prompt(evidence, diagnosis)
    sent = redact_data(messages(parts)[0])  # a secret in the pasted logs never leaves for the endpoint
    fitted = ""
    reply, error = "", ""
    try:
        listed = request_json("GET", f"{api}/models", timeout_s=30.0)
        data = listed.body.get("data") if isinstance(listed.body, dict) else None
        if listed.status != 200 or not data:
            raise LanebookError(listed.refused or f"GET {api}/models answered {listed.status}, no model listed")
        entry = next((d for d in data if model is None or d.get("id") == model), data[0])
        model = model or str(entry.get("id"))
        budget = context_budget_chars(entry.get("max_model_len"), max_tokens)
        for _ in range(FIT_TRIES):
            chosen, fitted = messages(parts, budget_chars=budget)
            sent = redact_data(chosen)
            answer = request_json(
                "POST",
                f"{api}/chat/completions",
                {"model": model, "messages": sent, "temperature": 0, "max_tokens": max_tokens},
                timeout_s=timeout_s,
            )
            if budget is None or answer.status != 400 or "context length" not in json.dumps(answer.body):
                break
            budget //= 2  # its tokenizer packs fewer characters a token than assumed: half the room, again
        if answer.status != 200:
            raise LanebookError(answer.refused or f"POST {api}/chat/completions answered {answer.status}")
        reply = _reply(answer.body)
    except LanebookError as exc:
        error = str(exc)
    digest = hashlib.sha256(json.dumps(sent, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    record = _record(outputs or paths.outputs_dir(), api, model or "", sent, digest, reply, error)
    return ModelReading(api, model or "", digest, redact(reply), str(record), redact(error), fitted)


def _reply(body: object) -> str:
    try:
        message = body["choices"][0]["message"]  # type: ignore[index]
    except (KeyError, IndexError, TypeError):
        raise LanebookError("the reply holds no choices[0].message") from None
    text = message.get("content") or message.get("reasoning_content") or message.get("reasoning") or ""
    return str(text).strip()


def _record(outputs: Path, api: str, model: str, sent: Sequence[dict], digest: str, reply: str, error: str) -> Path:
    path = outputs / "doctor" / f"{utc_stamp()}-ask-{record_id()}.json"
    data = {"api": api, "model": model, "prompt_sha256": digest, "messages": list(sent), "reply": reply}
    data |= {"error": error} if error else {}
    write_atomic(path, json.dumps(redact_data(data), indent=2, ensure_ascii=False) + "\n", exclusive=True)
    return path
