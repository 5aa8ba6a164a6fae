"""The openai backend against a minimal stand-in OpenAI-compatible server without (some of) vLLM's
extensions: it is refused when the engine loads, before any generation, with one line naming what
the server lacks, through the command a researcher types (``chorus generate "hi" -b openai`` with
``CHORUS_OPENAI_ENDPOINTS``) behind the real error boundary (exit 2, like any bad input).

The stand-in is a plain OpenAI API on loopback (``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions`` with a text or token-array prompt, canned answers); each vLLM extension
(``POST /tokenize``, ``prompt_logprobs``, ``structured_outputs``) can be switched on, so every check
is seen to refuse what it should and to pass a server that has it. No model runs here: the real
vLLM server is tests/test_serving_openai.py."""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import EMBEDDED

from chorus.cli import app
from chorus.errors import run_command
from chorus.serving.launch import free_port

CANNED = "a canned reply"
# the request fields of the plain OpenAI completions API; a strict server refuses any other
OPENAI_COMPLETION_FIELDS = {"model", "prompt", "suffix", "max_tokens", "temperature", "top_p", "n", "stream",
                            "logprobs", "echo", "stop", "presence_penalty", "frequency_penalty", "best_of",
                            "logit_bias", "user", "seed"}


@dataclass
class StandIn:
    """An OpenAI-compatible server on a thread. Off by default, each of vLLM's extensions can be
    offered; ``strict`` answers 400 to fields outside the OpenAI API (as api.openai.com does),
    otherwise they are ignored (as many servers do). Every request is recorded."""
    tokenize: bool = False
    prompt_logprobs: bool = False
    structured_outputs: bool = False
    strict: bool = False
    requests: list[tuple[str, str, dict]] = field(default_factory=list)

    def __post_init__(self) -> None:
        from transformers import AutoTokenizer

        from chorus.serving.profiles import get_profile

        # the same tokenizer as the profile: a /tokenize that is offered answers truthfully
        self.tok = AutoTokenizer.from_pretrained(str(get_profile(EMBEDDED).path)) if self.tokenize else None
        self.port = free_port()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def posted(self, path: str) -> list[dict]:
        return [body for method, p, body in self.requests if method == "POST" and p == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    # -- the API -----------------------------------------------------------------------------
    def answer(self, method: str, path: str, body: dict) -> tuple[int, dict]:
        self.requests.append((method, path, body))
        if method == "GET" and path == "/v1/models":
            return 200, {"object": "list", "data": [{"id": EMBEDDED, "object": "model", "owned_by": "stand-in"}]}
        if method == "POST" and path == "/v1/chat/completions":
            return 200, {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": CANNED}}]}
        if method == "POST" and path == "/v1/completions":
            return self.completion(body)
        if method == "POST" and path == "/tokenize" and self.tokenize:
            ids = self.tok(body["prompt"], add_special_tokens=body.get("add_special_tokens", True))["input_ids"]
            return 200, {"tokens": ids, "count": len(ids)}
        return 404, {"error": {"message": f"no route {method} {path}"}}

    def completion(self, body: dict) -> tuple[int, dict]:
        extra = sorted(set(body) - OPENAI_COMPLETION_FIELDS)
        if self.strict and extra:
            return 400, {"error": {"message": f"Unrecognized request argument supplied: {extra[0]}"}}
        prompt = body["prompt"]  # the OpenAI API takes a string or an array of token ids
        n_prompt = len(prompt) if isinstance(prompt, list) else len(prompt.split())
        choice: dict = {"index": 0, "text": CANNED, "finish_reason": "stop"}
        if self.prompt_logprobs and "prompt_logprobs" in body and isinstance(prompt, list):
            choice["prompt_logprobs"] = [None] + [{str(t): {"logprob": -1.0}} for t in prompt[1:]]
        allowed = (body.get("structured_outputs") or {}).get("choice")
        if self.structured_outputs and allowed:
            choice["text"] = allowed[0]
        return 200, {"object": "text_completion", "choices": [choice],
                     "usage": {"prompt_tokens": n_prompt, "completion_tokens": 3, "total_tokens": n_prompt + 3}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                code, data = server.answer(method, self.path, json.loads(raw) if raw else {})
                out = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self):
                self._reply("GET")

            def do_POST(self):
                self._reply("POST")

        return Handler


@pytest.fixture
def stand_in(monkeypatch):
    """Makes stand-ins and points the openai backend at the last one, as a researcher would."""
    made: list[StandIn] = []

    def make(**offers: bool) -> StandIn:
        s = StandIn(**offers)
        made.append(s)
        monkeypatch.setenv("CHORUS_OPENAI_ENDPOINTS", s.url)
        return s

    yield make
    for s in made:
        s.close()


def _generate(capsys, *extra: str) -> tuple[int, str, str]:
    rc = run_command(app, ["generate", "hi", "-b", "openai", "-m", EMBEDDED, "--max-tokens", "8", *extra])
    out = capsys.readouterr()
    return rc, out.out, out.err


REFUSALS = [
    # (what the stand-in offers, the fragment of the one line that names what it lacks)
    ({}, "has no POST /tokenize (HTTP 404 at {url_root}/tokenize), the vLLM extension the openai backend checks "
         "the server's tokenizer with before it sends prompts as token ids"),
    ({"tokenize": True}, "gives no prompt_logprobs on POST /completions, a vLLM extension that option "
                         "log-probabilities are read from"),
    ({"tokenize": True, "strict": True}, "refuses the openai backend's request on POST /completions (HTTP 400: "
                                         "{{\"error\": {{\"message\": \"Unrecognized request argument supplied: "
                                         "prompt_logprobs\"}}}}); it needs vLLM's extensions there"),
    ({"tokenize": True, "prompt_logprobs": True}, "ignores structured_outputs on POST /completions, a vLLM "
                                                  "extension that JSON-schema and choice replies are constrained by "
                                                  "(asked for 'zebra-42', got 'a canned reply')"),
]


@pytest.mark.parametrize("offers, says", REFUSALS, ids=["plain", "no_prompt_logprobs", "strict", "no_structured"])
def test_a_server_without_vllms_extensions_is_refused_in_one_line_before_any_generation(stand_in, capsys,
                                                                                        offers, says):
    s = stand_in(**offers)
    rc, out, err = _generate(capsys)
    line = says.format(url_root=s.url[: -len("/v1")])
    assert rc == 2, err  # bad input: the server named is the wrong kind, not a run that failed
    assert err.startswith("error: model: server " + s.url) and line in err, err
    assert err.strip().count("\n") == 0 and err.rstrip().endswith("serve the model with `chorus serve` or "
                                                                    "`vllm serve`"), err
    assert out == ""
    assert not s.posted("/v1/chat/completions")
    # nothing generated: at most the one extensions probe reached /completions, never the prompt "hi"
    probes = s.posted("/v1/completions")
    assert len(probes) == (0 if not offers else 1)
    assert all(p["max_tokens"] == 16 and p["structured_outputs"] == {"choice": ["zebra-42"]} for p in probes)


def test_a_server_with_the_extensions_passes_the_checks_and_generates(stand_in, capsys):
    """The same stand-in offering every extension the backend uses: the checks let it through and
    `chorus generate` prints its (canned) reply, so the refusals above are about what is missing."""
    s = stand_in(tokenize=True, prompt_logprobs=True, structured_outputs=True)
    rc, out, err = _generate(capsys, "--json")
    assert rc == 0, err
    assert json.loads(out.strip().splitlines()[-1])["text"] == CANNED
    probe, sent = s.posted("/v1/completions")  # the probe, then the one generation
    assert probe["prompt_logprobs"] == 0 and isinstance(sent["prompt"], list) and sent["max_tokens"] == 8


def test_the_python_api_raises_a_model_error_that_names_the_endpoint(stand_in):
    """load_engine raises IncompatibleServerError: an EndpointError (the openai backend's errors) and
    a ModelError (bad input for the command line's error boundary)."""
    from chorus.serving import ModelError, load_engine
    from chorus.serving.backends.openai import EndpointError, IncompatibleServerError

    s = stand_in()
    with pytest.raises(IncompatibleServerError, match=f"server {s.url} has no POST /tokenize") as got:
        load_engine(EMBEDDED, "openai")
    assert isinstance(got.value, EndpointError) and isinstance(got.value, ModelError)
    assert [(m, p) for m, p, _b in s.requests] == [("GET", "/v1/models"), ("POST", "/tokenize")]
    # the model check comes first even with max_model_len given: a model the server does not serve
    # is named as such, not read as a missing endpoint from the 404 a real server gives for it
    with pytest.raises(EndpointError, match=f"server {s.url} does not serve 'another-model'"):
        load_engine(EMBEDDED, "openai", max_model_len=2048, served_model="another-model")


def test_an_experiment_on_a_plain_server_stops_with_exit_2(stand_in, capsys, tmp_path):
    """A debate run with model.backend=openai: the same line, prefixed by the role, and exit 2 from
    the command's one error boundary (not 'the run failed')."""
    s = stand_in()
    rc = run_command(app, ["debate", "run", "smoke", "--set", "model.backend=openai", "--set",
                           f"model.endpoints=[{s.url}]", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert rc == 2, err
    last = err.strip().splitlines()[-1]  # after the run's progress line
    assert last.startswith(f"error: model: server {s.url} has no POST /tokenize"), err
    assert not s.posted("/v1/completions")
