"""A deterministic synthetic raw lake: every source in the formats the real producers write.

``generate_lake(root, interactions=N)`` writes the same bytes for the same arguments: seeded
RNGs (one per source, derived from ``seed``), fixed base dates, no wall clock, uuids drawn from
the RNG. The default size is the bundled sample lake (``data/raw``); the benchmark asks for a
million interactions with the other sources in proportion (streamed file by file, so memory
stays flat). With ``bad_cases`` the lake also holds one instance of many quarantine reasons at
known lines (listed in a manifest when ``manifest_path`` is given) plus the non-error edge
cases: a UTF-8 BOM, CRLF endings, blank lines, an unknown extra key and a half-written last line.

This module must not import Dagster: it is used by the CLI, the benchmark and the tests.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
import struct
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

BASE = datetime(2026, 2, 2, 8, 0, 0)  # the lake's first instant (naive local = UTC)
SPAN_DAYS = 60  # every lake, whatever its size, spans about two months
BOM = b"\xef\xbb\xbf"
# The four real rows of the energyflow-cosmology buffer (byte for byte), kept here so the sample
# lake can be rebuilt without ../shared.
REAL_SIGNAL_ROWS = [
    '{"id": "18be509a-2b82-4f4b-970a-6ea497ad12a2", "timestamp": 1765369657929, "signal": "good", "strength": 1.0, "context": "Correctly identified as STM - this is ephemeral test data", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:27:37.929481", "target_type": "chunk", "target_id": "82f873c7-4a60-4797-8491-6cc78934085e", "aspect": "classification", "original_class": null, "suggested_class": null}',
    '{"id": "07459a6d-b489-4997-8cdd-cb6d0affdfba", "timestamp": 1765369671189, "signal": "correct", "strength": 1.0, "context": "Good test case for private knowledge", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:27:51.189324", "target_type": "chunk", "target_id": "82f873c7-4a60-4797-8491-6cc78934085e", "aspect": "relevance", "original_class": null, "suggested_class": null}',
    '{"id": "a24dfc10-8fa0-4f52-9229-8196c107f729", "timestamp": 1765370818531, "signal": "good", "strength": 1.0, "context": "Bootstrap validation test", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:46:58.531628", "target_type": "chunk", "target_id": "6056a8f7-61af-4f88-8c07-eed1d7f3c6aa", "aspect": "classification", "original_class": null, "suggested_class": null}',
    '{"id": "30a31765-bfe0-43ad-a50e-0e96f31afe68", "timestamp": 1765370864623, "signal": "correct", "strength": 1.0, "context": "Good bootstrap example", "session_id": null, "source": "manual", "created_at": "2025-12-10T13:47:44.623389", "target_type": "chunk", "target_id": "6056a8f7-61af-4f88-8c07-eed1d7f3c6aa", "aspect": "relevance", "original_class": null, "suggested_class": null}',
]

SESSION_DDL = """CREATE TABLE session_feedback (
  insertion_order INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL,
  session_id_opaque TEXT NOT NULL, user_id_or_null TEXT, recorded_at TEXT NOT NULL,
  recorded_date TEXT NOT NULL,
  label TEXT NOT NULL CHECK (label IN ('positive','negative','skip')),
  turn_count_at_end INTEGER NOT NULL,
  source TEXT NOT NULL CHECK (source IN ('cli_end','cli_exit','api_end')),
  schema_version INTEGER NOT NULL DEFAULT 1, value TEXT NOT NULL)"""

EVENTLOG_DDL = """CREATE TABLE eventlog (seq INTEGER PRIMARY KEY AUTOINCREMENT, event_type TEXT NOT NULL,
  timestamp TEXT NOT NULL, source_id TEXT NOT NULL, source_file TEXT, data TEXT NOT NULL,
  CHECK(json_valid(data)))"""

Progress = Callable[[str], None]

# ------------------------------------------------------------------------------ text material

LANGS = ["Python", "Rust", "TypeScript", "Go", "SQL", "Bash", "Java", "C++"]
LANG_TAGS = {"Python": "python", "Rust": "rust", "TypeScript": "ts", "Go": "go", "SQL": "sql",
             "Bash": "bash", "Java": "java", "C++": "cpp"}
TASKS = [
    "read a large CSV file without loading it into memory", "parse ISO-8601 timestamps with a UTC offset",
    "retry an HTTP request with exponential backoff", "deduplicate a list while keeping the order",
    "stream JSON lines from a file", "hash a password safely",
    "run two tasks concurrently and collect the results", "mock the clock in a unit test",
    "paginate through a REST API", "cache the result of an expensive function",
    "walk a directory tree and skip hidden files", "merge two sorted iterators",
    "validate an email address", "parse command-line flags", "read environment variables with defaults",
    "open a SQLite database read-only", "write a file atomically", "format a byte count for humans",
    "compute a rolling average", "serialize a dataclass to JSON", "handle Ctrl-C gracefully",
    "profile a slow loop", "split a string on the first delimiter", "convert a naive datetime to UTC",
    "upsert rows into a table", "batch inserts for speed", "find duplicate files by content hash",
    "limit the number of concurrent requests", "decode base64 without padding",
    "sort a list of records by two keys", "tail a log file that is being appended to",
    "detect the encoding of a text file", "normalise Unicode text before comparing it",
    "compare two floats with a tolerance", "implement an LRU cache", "memory-map a big file",
]
ERRORS = [
    "TypeError: 'NoneType' object is not subscriptable",
    "thread 'main' panicked at 'called `Option::unwrap()` on a `None` value'",
    "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte",
    "error[E0502]: cannot borrow `v` as mutable because it is also borrowed as immutable",
    "sqlite3.OperationalError: database is locked",
    "Error: read ECONNRESET",
    "KeyError: 'timestamp'",
    "panic: runtime error: index out of range [3] with length 3",
    "duckdb.ConversionException: Could not convert string 'yesterday' to TIMESTAMP",
    "java.lang.NullPointerException: Cannot invoke \"String.length()\" because \"s\" is null",
]
SNIPPETS = {
    "Python": ["with open(path) as f:\n    rows = f.read().split(\"\\n\")\nfor row in rows:\n    handle(row)",
               "def load(path):\n    data = json.load(open(path))\n    return data[\"items\"][0]",
               "for i in range(len(xs)):\n    if xs[i] in seen:\n        xs.remove(xs[i])"],
    "Rust": ["let v = vec![1, 2, 3];\nlet first = &v[0];\nv.push(4);\nprintln!(\"{}\", first);",
             "fn parse(s: &str) -> u32 {\n    s.trim().parse().unwrap()\n}",
             "let file = File::open(path).unwrap();\nlet reader = BufReader::new(file);"],
    "TypeScript": ["const res = await fetch(url);\nconst data = res.json();\nconsole.log(data.items.length);",
                   "function dedupe(xs: string[]) {\n  return xs.filter((x, i) => xs.indexOf(x) == i);\n}"],
    "Go": ["for i := 0; i <= len(xs); i++ {\n\tfmt.Println(xs[i])\n}",
           "resp, _ := http.Get(url)\nbody, _ := io.ReadAll(resp.Body)"],
    "SQL": ["SELECT * FROM events e\nJOIN users u ON u.id = e.user_id\nWHERE e.ts > '2026-01-01'\nORDER BY 1;",
            "INSERT INTO t VALUES (1, 'a');\nINSERT INTO t VALUES (2, 'b');"],
    "Bash": ["for f in $(ls *.log); do\n  cat $f | grep ERROR\ndone", "tail -f app.log | grep -v DEBUG > errors.txt"],
    "Java": ["String s = map.get(key);\nreturn s.length();", "List<Integer> xs = new ArrayList<>();\nfor (int x : xs) xs.remove(x);"],
    "C++": ["std::vector<int> v{1, 2, 3};\nfor (auto it = v.begin(); it != v.end(); ++it)\n    if (*it == 2) v.erase(it);",
            "char buf[16];\nstrcpy(buf, input);"],
}
ANSWER_CODE = {
    "Python": ["with open(path, encoding=\"utf-8\") as f:\n    for line in f:\n        handle(line.rstrip(\"\\n\"))",
               "from functools import lru_cache\n\n@lru_cache(maxsize=1024)\ndef score(key: str) -> float:\n    return expensive(key)",
               "def dedupe(xs):\n    seen = set()\n    return [x for x in xs if not (x in seen or seen.add(x))]",
               "import os, tempfile\n\ndef write_atomic(path, data: bytes):\n    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path))\n    with os.fdopen(fd, \"wb\") as f:\n        f.write(data)\n    os.replace(tmp, path)  # atomic on POSIX"],
    "Rust": ["fn parse(s: &str) -> Result<u32, std::num::ParseIntError> {\n    s.trim().parse()\n}",
             "let reader = BufReader::new(File::open(path)?);\nfor line in reader.lines() {\n    handle(&line?);\n}",
             "let mut v = vec![1, 2, 3];\nv.push(4);\nlet first = v[0]; // copy, no borrow held\nprintln!(\"{first}\");"],
    "TypeScript": ["const res = await fetch(url);\nif (!res.ok) throw new Error(`HTTP ${res.status}`);\nconst data = await res.json();",
                   "const dedupe = <T,>(xs: T[]): T[] => [...new Set(xs)];"],
    "Go": ["for _, x := range xs {\n\tfmt.Println(x)\n}",
           "resp, err := http.Get(url)\nif err != nil {\n\treturn err\n}\ndefer resp.Body.Close()"],
    "SQL": ["INSERT INTO t (id, v) VALUES (?, ?)\nON CONFLICT (id) DO UPDATE SET v = excluded.v;",
            "SELECT user_id, avg(ms) OVER (PARTITION BY user_id ORDER BY ts ROWS 6 PRECEDING) AS rolling\nFROM latency;"],
    "Bash": ["grep -h ERROR -- *.log", "tail -F app.log | grep --line-buffered -v DEBUG >> errors.txt"],
    "Java": ["String s = map.getOrDefault(key, \"\");\nreturn s.length();",
             "xs.removeIf(x -> x == 2);"],
    "C++": ["std::erase(v, 2);  // C++20", "std::string buf(input);  // no fixed-size buffer"],
}
LOCAL_PROMPTS = [
    "¿Cómo puedo leer un archivo CSV grande en {lang} sin cargarlo entero en memoria?",
    "Wie kann ich in {lang} eine Datei atomar schreiben?",
    "{lang}で大きなファイルを一行ずつ読むにはどうすればいいですか？",
    "Comment gérer proprement les erreurs réseau en {lang} ?",
    "Hvordan leser jeg miljøvariabler med standardverdier i {lang}?",
    "Как в {lang} отсортировать список записей по двум ключам?",
]
PROMPT_TEMPLATES = [
    "How do I {task} in {lang}?",
    "What's the idiomatic way to {task} in {lang}?",
    "Write a {lang} function to {task}.",
    "I need to {task} in {lang}. It has to work on files bigger than RAM — any ideas?",
    "My {lang} code throws `{error}` when I try to {task}. What am I doing wrong?\n\n```\n{snippet}\n```",
    "Review this {lang} code that tries to {task}:\n\n```\n{snippet}\n```",
    "Can you refactor `{ident}` so it can {task}? Keep the public API.",
    "Explain step by step how to {task} in {lang} 🙏",
    "Tests fail only on CI with `{error}` — flaky? 🐛 Context: we {task} in {lang}.",
    "{local}",
]
IDENTS = ["load_config", "parse_row", "EventLog::append", "fetchPage", "merge_sorted", "retry_with_backoff",
          "SessionStore.save", "build_index", "normalize_prompt", "FeedbackBuffer.flush"]
TOOLS = ["the standard library", "an iterator", "a context manager", "a bounded channel", "a generator",
         "a prepared statement", "`itertools`", "`serde`", "a `HashSet`", "`asyncio.gather`"]
CAUSES = ["the iterator is consumed twice", "the file is opened in text mode", "the lock is held across an await",
          "you compare naive and aware datetimes", "the connection is shared between threads",
          "the loop index is off by one", "`None` is returned on the error path", "the error is swallowed"]
ANTIS = ["loading everything into memory", "a bare `except:`", "global state", "`unwrap()` on user input",
         "string concatenation in a loop", "a busy-wait loop"]
INTROS = ["Here's a straightforward way to do it.", "The short answer: use {tool}.",
          "You're close — the bug is that {cause}.", "Good question! There are two common approaches; the simpler one uses {tool}.",
          "I'd avoid {anti} here. Instead:", "Voilà — une version plus robuste avec {tool} :",
          "Sure ✅ here's an idiomatic version.", "This happens because {cause}. Fix:"]
CLOSINGS = ["Let me know if you want a version with tests.", "This runs in O(n) time and constant memory.",
            "Edge case: an empty input returns an empty result.", "⚠️ Don't forget to close the handle.",
            "Tested on the latest stable toolchain.", "",
            "Notes:\n- it handles the empty case\n- it never panics on bad input\n- complexity is linear"]
BAD_ANSWERS = ["Just use {anti}; it's simpler and works fine for small inputs.",
               "You can't really do that in {lang}. Rewrite it in another language. 🤷",
               "Wrap everything in a try/catch and ignore the error.",
               "Use `eval()` on the input string, then read the result.",
               "I think the problem is the compiler. Try reinstalling it."]
CONTEXTS = ["You are a senior {lang} reviewer. Be concise.",
            "Repository: flywheel-lake (Python 3.12, Dagster, DuckDB)",
            "Project rules:\n- no unwrap() in library code\n- every public fn has a doc comment\n- tests next to the code",
            "Nutzer bevorzugt deutsche Antworten.",
            "CWD: /home/dev/src/patina\nBranch: feat/scry-feedback",
            "The user is on Windows 11; paths use backslashes like C:\\Users\\dev\\proj.",
            "Answer in English. Code blocks must be runnable."]
# The collector's ``project_context: Optional[str]``: unset, empty, or a project name.
PROJECT_CONTEXTS = [None, None, None, None, "patina", "flywheel-lake", "", "patina/src", "código/app"]
MODELS = ["claude-sonnet-4-5", "claude-sonnet-4-5", "claude-haiku-4-5", "claude-opus-4-1", "gpt-4o-2024-08-06",
          "qwen2.5-coder:7b", "llama3.1:8b"]
INTERACTION_TYPES = (["code_generation"] * 25 + ["prompt_response"] * 20 + ["error_fix"] * 12
                     + ["code_review"] * 10 + ["refactor"] * 8 + ["documentation"] * 6 + ["test"] * 6
                     + ["search"] * 5 + ["decision"] * 4 + ["other"] * 4)
SOURCES = ["cli", "cli", "vscode", "mcp", "api", "finch-tui"]
TASK_TYPES = {"code_generation": "coding", "prompt_response": "explanation", "error_fix": "debugging",
              "code_review": "review", "refactor": "coding", "documentation": "writing", "test": "testing",
              "search": "search", "decision": "planning", "other": "other"}
TOPICS = [None, "rust", "python", "sql", "concurrency", "testing", "io", "unicode"]
COMPETENCE = ["novice", "intermediate", "intermediate", "expert", "Unknown"]
INFERENCE_REASONS = {
    "accepted": ["user continued with the next task", "user copied the code", "user said thanks"],
    "rejected": ["user re-asked the same question", "user reverted the edit", "user said it does not work"],
    "neutral": ["session ended without follow-up", "no signal within 10 minutes"],
}
ARMS = ["arm-vector-heavy", "arm-graph-2hop", "arm-balanced", "arm-fulltext"]


def _esc(text: str) -> str:
    """The JSON string escape of ``text`` without its quotes (escapes concatenate)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _uuid4(rng: random.Random) -> str:
    """``str(uuid.UUID(int=rng.getrandbits(128), version=4))``, a few times faster."""
    x = rng.getrandbits(128)
    x = (x & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
    h = "%032x" % x
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _dumps(record) -> str:
    return json.dumps(record, ensure_ascii=False)


def _utc_z(ts: datetime) -> str:
    return ts.isoformat() + "Z"


def _epoch(ts: datetime) -> int:
    """Epoch seconds of a naive UTC datetime."""
    return int((ts - datetime(1970, 1, 1)).total_seconds())


# ------------------------------------------------------------------------------ writing


class _Lake:
    def __init__(self, root: Path, bad: bool):
        self.root = root
        self.bad = bad
        self.manifest: list[dict] = []
        self.stats: dict[str, dict[str, int]] = {}
        self.deferred_bytes = 0

    def count(self, source: str, rel: str, lines: int) -> None:
        s = self.stats.setdefault(source, {"files": 0, "lines": 0, "bytes": 0})
        s["files"] += 1
        s["lines"] += lines
        s["bytes"] += (self.root / rel).stat().st_size

    def note(self, source: str, rel: str, line: int, offset: int | None, reason: str) -> None:
        self.manifest.append({"source": source, "path": rel, "line_number": line, "byte_offset": offset,
                              "reason": reason})


class _Sink:
    """One JSONL file written line by line. ``plants`` maps 1-based line numbers to raw lines
    (bytes, reason or None for non-error lines such as blanks) inserted at exactly that line;
    plants beyond the end are written at close. Every planted bad line goes to the manifest with
    its real line number and byte offset."""

    __slots__ = ("lake", "rel", "source", "fh", "eol", "lines", "plants", "buf")

    def __init__(self, lake: _Lake, rel: str, source: str, *, bom: bool = False, crlf: bool = False,
                 plants: dict[int, tuple[bytes, str | None]] | None = None):
        path = lake.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        self.lake, self.rel, self.source = lake, rel, source
        self.fh = open(path, "wb")
        if bom:
            self.fh.write(BOM)
        self.eol = "\r\n" if crlf else "\n"
        self.lines = 0
        self.plants = dict(plants or {})
        self.buf: list[str] = []

    def add(self, text: str) -> None:
        if self.plants and self.lines + 1 in self.plants:
            self._plant(self.lines + 1)
        self.buf.append(text)
        self.lines += 1
        if len(self.buf) >= 512:
            self._drain()

    def _drain(self) -> None:
        if self.buf:
            eol = self.eol
            self.fh.write((eol.join(self.buf) + eol).encode("utf-8"))
            self.buf.clear()

    def _plant(self, number: int) -> None:
        self._drain()
        while number in self.plants:
            raw, reason = self.plants.pop(number)
            if reason is not None:
                self.lake.note(self.source, self.rel, number, self.fh.tell(), reason)
            self.fh.write(raw + self.eol.encode())
            self.lines += 1
            number += 1

    def close(self, tail: bytes | None = None) -> None:
        self._drain()
        leftovers = [self.plants[k] for k in sorted(self.plants)]  # planned beyond the end
        self.plants = {}
        for planted in leftovers:
            self.plants[self.lines + 1] = planted
            self._plant(self.lines + 1)
        if tail is not None:  # a writer still appending: a half-written last line, no newline
            self.lake.note(self.source, self.rel, self.lines + 1, self.fh.tell(), "deferred")
            self.fh.write(tail)
            self.lake.deferred_bytes += len(tail)
        self.fh.close()
        self.lake.count(self.source, self.rel, self.lines)


# ------------------------------------------------------------------------------ entry point


def generate_lake(root: Path, interactions: int = 3000, seed: int = 7, bad_cases: bool = True,
                  progress: Progress | None = None, manifest_path: Path | None = None) -> dict:
    """Write a synthetic raw lake under ``root`` (the layout of SPEC section 2); return a summary.

    Same arguments, same bytes. ``manifest_path`` (only when given) receives the planted bad
    lines: ``[{source, path, line_number, byte_offset, reason}]`` sorted by path and line, the
    half-written last line listed with reason ``deferred``. Existing files of the same names are
    overwritten; other files under ``root`` are left alone.
    """
    say = progress or (lambda _m: None)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    lake = _Lake(root, bad_cases)
    n = max(0, int(interactions))

    def rng(name: str) -> random.Random:
        return random.Random(f"flywheel-synth:{seed}:{name}")

    say(f"interactions, feedback, outcomes: {n:,} interactions")
    sessions = _interactions(lake, rng("interactions"), n)
    say("legacy log")
    _legacy(lake, rng("legacy"), max(24, n // 100))
    say("session ratings (SQLite)")
    _session_ratings(lake, rng("sessions"), sessions)
    say("weighted queue and ratings")
    _weighted(lake, rng("weighted"), max(40, n // 100))
    say("eventlog (SQLite + JSONL export)")
    _eventlog(lake, rng("eventlog"), max(16, n // 250))
    say("signals")
    _signals(lake, rng("signals"), max(60, n // 100))

    manifest = sorted(lake.manifest, key=lambda m: (m["path"], m["line_number"]))
    if manifest_path is not None:
        manifest_path = Path(manifest_path)
        manifest_path.parent.mkdir(parents=True, exist_ok=True)
        manifest_path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    sources = {name: lake.stats[name] for name in (
        "interactions", "legacy_log", "feedback", "outcomes", "session_ratings", "weighted_queue",
        "weighted_ratings", "eventlog", "signals") if name in lake.stats}
    return {
        "root": str(root),
        "seed": seed,
        "interactions": n,
        "files": sum(s["files"] for s in sources.values()),
        "lines": sum(s["lines"] for s in sources.values()),
        "bytes": sum(s["bytes"] for s in sources.values()),
        "deferred_bytes": lake.deferred_bytes,
        "bad_cases": len([m for m in manifest if m["reason"] != "deferred"]),
        "sources": sources,
    }


# ------------------------------------------------------------------------------ interactions


class _Material:
    """Pre-escaped text pools, so the hot loop only concatenates strings."""

    def __init__(self, rng: random.Random, n: int):
        self.rng = rng
        self.langs = [_esc(x) for x in LANGS]
        self.templates = [_esc(t) for t in PROMPT_TEMPLATES]
        self.tasks = [_esc(x) for x in TASKS]
        self.errors = [_esc(x) for x in ERRORS]
        self.snippets = {_esc(k): [_esc(s) for s in v] for k, v in SNIPPETS.items()}
        self.answer_code = {_esc(k): [_esc(s) for s in v] for k, v in ANSWER_CODE.items()}
        self.tags = {_esc(k): v for k, v in LANG_TAGS.items()}
        self.idents = [_esc(x) for x in IDENTS]
        self.local = [_esc(x) for x in LOCAL_PROMPTS]
        intros = []
        for intro in INTROS:
            for i in range(len(TOOLS)):
                intros.append(intro.format(tool=TOOLS[i], cause=CAUSES[i % len(CAUSES)],
                                           anti=ANTIS[i % len(ANTIS)]))
        self.intros = [_esc(x) for x in dict.fromkeys(intros)]
        self.closings = [_esc(x) for x in CLOSINGS]
        self.contexts = [_esc(c.format(lang=lang)) for c in CONTEXTS for lang in LANGS[:3]]
        self.project_contexts = [json.dumps(p, ensure_ascii=False) for p in PROJECT_CONTEXTS]
        # A pool of prompts asked again and again (same normalised prompt and context, different
        # answers, some liked and some not): the DPO pairs downstream.
        self.canonical = [self._canonical() for _ in range(max(60, n // 40))]

    def prompt(self) -> tuple[str, str]:
        """A fresh question and its language (the answer is in the same language)."""
        r = self.rng.random
        lang = self.langs[int(r() * len(self.langs))]
        template = self.templates[int(r() * len(self.templates))]
        return lang, template.format(
            task=self.tasks[int(r() * len(self.tasks))], lang=lang,
            error=self.errors[int(r() * len(self.errors))],
            snippet=_pick(self.snippets[lang], r), ident=self.idents[int(r() * len(self.idents))],
            local=self.local[int(r() * len(self.local))].replace("{lang}", lang))

    def answer(self, lang: str | None = None) -> str:
        r = self.rng.random
        lang = lang or self.langs[int(r() * len(self.langs))]
        closing = self.closings[int(r() * len(self.closings))]
        body = (f"{self.intros[int(r() * len(self.intros))]}\\n\\n```{self.tags[lang]}\\n"
                f"{_pick(self.answer_code[lang], r)}\\n```")
        return f"{body}\\n\\n{closing}" if closing else body

    def bad_answer(self, lang: str) -> str:
        r = self.rng.random
        text = _esc(BAD_ANSWERS[int(r() * len(BAD_ANSWERS))])
        return text.replace("{anti}", _esc(ANTIS[int(r() * len(ANTIS))])).replace("{lang}", lang)

    def context(self) -> str:
        r = self.rng.random()
        return "" if r < 0.55 else self.contexts[int((r - 0.55) / 0.45 * len(self.contexts))]

    def _canonical(self) -> tuple:
        rng = self.rng
        lang = self.langs[rng.randrange(len(self.langs))]
        task = TASKS[rng.randrange(len(TASKS))]
        if rng.random() < 0.1:
            text = f"How do I handle a résumé upload named 'café.pdf' in {LANGS[self.langs.index(lang)]}?"
        else:
            text = PROMPT_TEMPLATES[rng.randrange(4)].format(task=task, lang=LANGS[self.langs.index(lang)])
        # The same question typed differently: extra spaces, a trailing newline, decomposed accents.
        variant = "  " + text.replace(" ", "   ", 2) + "\n"
        if "é" in text:
            variant = text.replace("é", "e\u0301")
        context = self.context()
        answers = [(self.answer(lang), True) for _ in range(rng.randint(1, 3))]
        answers += [(self.bad_answer(lang), False) for _ in range(rng.randint(1, 2))]
        return _esc(text), _esc(variant), context, answers


def _pick(items: list, r) -> str:
    return items[int(r() * len(items))]


def _interaction_line(iid: str, ts: str, itype: str, prompt: str, answer: str, context: str, model: str,
                      tokens: int, latency: str, feedback: str, edited: str, accepted: str, source: str,
                      session: str, project: str, extra: str = "") -> str:
    """Exactly ``json.dumps(record, ensure_ascii=False)`` of an InteractionRecord (pre-escaped)."""
    return (f'{{"id": "{iid}", "timestamp": "{ts}", "interaction_type": "{itype}", "input_text": "{prompt}", '
            f'"output_text": "{answer}", "context": "{context}", "model": {model}, "tokens_used": {tokens}, '
            f'"latency_ms": {latency}, "user_feedback": "{feedback}", "was_edited": {edited}, '
            f'"was_accepted": {accepted}, "source": "{source}", "session_id": "{session}", '
            f'"project_context": {project}{extra}}}')


class _DaySinks:
    """Sidecar files by day (feedback, outcomes): opened on first use, closed at the end."""

    def __init__(self, lake: _Lake, folder: str, suffix: str, source: str, plants: list[dict]):
        self.lake, self.folder, self.suffix, self.source = lake, folder, suffix, source
        self.sinks: dict[str, _Sink] = {}
        self.plants = list(plants)  # the k-th file opened gets plants[k]

    def add(self, day: str, text: str) -> None:
        sink = self.sinks.get(day)
        if sink is None:
            k = len(self.sinks)
            sink = self.sinks[day] = _Sink(self.lake, f"{self.folder}/{day}_{self.suffix}", self.source,
                                           plants=self.plants[k] if k < len(self.plants) else None)
        sink.add(text)

    def close(self) -> None:
        for day in sorted(self.sinks):
            self.sinks[day].close()


def _interactions(lake: _Lake, rng: random.Random, n: int) -> list[dict]:
    """Interactions (one file per session and day) with their feedback and outcome sidecars.
    Returns one small summary per session (for the session ratings)."""
    mat = _Material(rng, n)
    r = rng.random
    per_session = max(30, n // 2500)
    lengths: list[int] = []
    left = n
    while left > 0:
        k = min(left, max(1, int(per_session * (0.5 + r()))))
        lengths.append(k)
        left -= k
    span = SPAN_DAYS * 86400
    starts = sorted(3600 + int(r() * (span - 7200)) for _ in lengths)
    for k in range(min(4, len(starts))):  # the first sessions (where bad lines are planted) start early
        lengths[k] = max(lengths[k], 24)
        starts[k] = 600 * k
    excess = sum(lengths) - n  # exactly n records in all
    while excess > 0:
        if len(lengths) > 1 and lengths[-1] <= excess:
            excess -= lengths.pop()
            starts.pop()
        else:
            lengths[-1] -= excess
            excess = 0

    bad = lake.bad and n > 0
    fb_plants, oc_plants = [], []
    ix_plants: dict[int, dict[int, tuple[bytes, str | None]]] = {}
    if bad:
        template = _bad_template(rng)
        ix_plants = _interaction_plants(template)
        fb_plants = [
            {3: (b'{"record_id": "9f1c2e4a-0b7d-4c1e-8f3a-2d5b6c7e8f90", "feedback": "positive", '
                 b'"was_edited": false, "timestamp": "yesterday", "source": "manual"}', "bad_timestamp:timestamp")},
            {2: (b"[1,2]", "not_an_object")},
        ]
        oc_plants = [{2: (_dumps({
            "query": "How do I parse JSON?", "response_summary": "Use json.loads.", "task_type": "coding",
            "model": "claude-haiku-4-5", "id": "5d41c2a8-7e6f-4b3a-9c1d-0e2f3a4b5c6d",
            "timestamp": "2026-02-02T09:00:00", "topic": None, "competence_level": "novice", "strategy": {},
            "outcome": "maybe", "inference_reason": "unclear", "latency_ms": 812.0,
            "session_id": "0f9e8d7c-6b5a-4c3d-8e2f-1a0b9c8d7e6f"}).encode(), "bad_value:outcome")}]
    feedback = _DaySinks(lake, "feedback", "feedback.jsonl", "feedback", fb_plants)
    outcomes = _DaySinks(lake, "outcomes", "outcomes.jsonl", "outcomes", oc_plants)
    enc = json.JSONEncoder(ensure_ascii=False).encode

    sessions: list[dict] = []
    file_ordinal = 0
    one_day = timedelta(days=1)
    last_sink: _Sink | None = None
    canonical = mat.canonical
    n_types, n_models, n_sources = len(INTERACTION_TYPES), len(MODELS), len(SOURCES)
    models = [json.dumps(m) for m in MODELS]
    pcs = mat.project_contexts
    for s_index, (length, start) in enumerate(zip(lengths, starts)):
        session = _uuid4(rng)
        outcome_session = _uuid4(rng)
        sid8 = session[:8]
        ts = BASE + timedelta(seconds=start, microseconds=int(r() * 1e6))
        source = SOURCES[int(r() * n_sources)]
        model_pref = int(r() * n_models)
        project = pcs[int(r() * len(pcs))]
        sink: _Sink | None = None
        day_end = None
        pending: list[tuple[int, str]] = []  # (write after line, duplicate line)
        written = 0
        for i in range(length):
            if i:
                ts += timedelta(seconds=15 + int(r() * 200), microseconds=int(r() * 1e6))
            if r() < 0.08:
                ts = ts.replace(microsecond=0)  # isoformat then omits the microseconds
            if sink is None or ts >= day_end:
                if sink is not None:
                    for _, line in pending:
                        sink.add(line)
                    pending.clear()
                    sink.close()
                day = ts.date()
                day_end = datetime(day.year, day.month, day.day) + one_day
                kw = {}
                if bad:
                    kw = {"plants": ix_plants.get(file_ordinal), "bom": file_ordinal == 1,
                          "crlf": file_ordinal == 2}
                sink = _Sink(lake, f"interactions/interactions_{day.isoformat()}_{sid8}.jsonl",
                             "interactions", **kw)
                file_ordinal += 1
                written = 0
            stamp = ts.isoformat()
            iid = _uuid4(rng)
            itype = INTERACTION_TYPES[int(r() * n_types)]
            x = r()
            if x < 0.35:  # a repeated question
                prompt, variant, context, answers = canonical[int(x / 0.35 * len(canonical))]
                if r() < 0.15:
                    prompt = variant
                answer, good = answers[int(r() * len(answers))]
                f = r()
                if good:
                    fb = "positive" if f < 0.30 else "negative" if f < 0.35 else "neutral" if f < 0.40 else "none"
                else:
                    fb = "negative" if f < 0.30 else "positive" if f < 0.35 else "neutral" if f < 0.40 else "none"
            else:
                lang, prompt = mat.prompt()
                answer, context, good = mat.answer(lang), mat.context(), x < 0.9
                f = r()
                fb = "positive" if f < 0.10 else "negative" if f < 0.16 else "neutral" if f < 0.20 else "none"
            model = models[model_pref if r() < 0.7 else int(r() * n_models)]
            if r() < 0.01:
                model = "null"
            tokens = 40 + int(r() * r() * 3000)
            y = r()
            latency = "0" if y < 0.04 else repr(round(150 + y * y * 9000, 3))
            edited = fb == "negative" and r() < 0.4 or r() < 0.05
            accepted = (fb == "positive" or (fb != "negative" and r() < 0.7)) and not (fb == "negative" and r() < 0.85)
            extra = ""
            if bad and file_ordinal == 4 and written == 1:
                extra = ', "client_version": "2.4.1"'  # an unknown key: kept in `extra`, not an error
            line = _interaction_line(iid, stamp, itype, prompt, answer, context, model, tokens, latency, fb,
                                     "true" if edited else "false", "true" if accepted else "false", source,
                                     session, project, extra)
            sink.add(line)
            written += 1
            while pending and pending[0][0] <= written:
                sink.add(pending.pop(0)[1])
            if r() < 0.006:  # feedback arrived while the record was still buffered: a later copy
                later = (ts + timedelta(seconds=30 + int(r() * 300))).isoformat()
                changed = "negative" if fb == "positive" else "positive"
                pending.append((written + 1 + int(r() * 4), _interaction_line(
                    iid, later, itype, prompt, answer, context, model, tokens, latency, changed, "true",
                    "true" if changed == "positive" else "false", source, session, project)))
            # sidecar feedback (~11% here, ~4% more from outcomes below)
            if r() < 0.11:
                z = r()
                when = ts if (fb != "none" and z < 0.1) else ts + timedelta(minutes=1 + int(z * 240),
                                                                          microseconds=int(r() * 1e6))
                f = r()
                if good:
                    side = "positive" if f < 0.7 else "negative" if f < 0.85 else "neutral"
                else:
                    side = "negative" if f < 0.7 else "positive" if f < 0.85 else "neutral"
                src = "manual" if r() < 0.9 else "outcome_tracker"
                w = "true" if r() < 0.15 else "false"
                if r() < 0.03:  # an older writer: no source, no was_edited
                    row = f'{{"record_id": "{iid}", "feedback": "{side}", "timestamp": "{when.isoformat()}"}}'
                else:
                    row = (f'{{"record_id": "{iid}", "feedback": "{side}", "was_edited": {w}, '
                           f'"timestamp": "{when.isoformat()}", "source": "{src}"}}')
                feedback.add(when.date().isoformat(), row)
                if side != "neutral" and r() < 0.15:  # the user changes their mind
                    then = when + timedelta(minutes=2 + int(r() * 30))
                    flip = "negative" if side == "positive" else "positive"
                    feedback.add(then.date().isoformat(),
                                 f'{{"record_id": "{iid}", "feedback": "{flip}", "was_edited": false, '
                                 f'"timestamp": "{then.isoformat()}", "source": "manual"}}')
            if r() < 0.2:
                _outcome(rng, outcomes, feedback, enc, ts, iid, prompt, answer, itype, model, accepted,
                         outcome_session)
            if r() < 0.0015:  # feedback for an interaction that has not arrived (yet)
                when = ts + timedelta(minutes=5)
                feedback.add(when.date().isoformat(),
                             f'{{"record_id": "{_uuid4(rng)}", "feedback": "positive", "was_edited": false, '
                             f'"timestamp": "{when.isoformat()}", "source": "manual"}}')
        for _, line in pending:
            sink.add(line)
        last_sink = sink
        if s_index == len(lengths) - 1:
            break
        sink.close()
        sessions.append({"session_id": session, "turns": length, "ended": ts})
    if last_sink is not None:
        tail = None
        if bad:  # the collector of the last session is still writing
            tail = _interaction_line(_uuid4(rng), ts.isoformat(), "other", "half", "written", "", "null", 1, "0",
                                     "none", "false", "false", "cli", session, "null").encode()[:70]
        last_sink.close(tail=tail)
        sessions.append({"session_id": session, "turns": length, "ended": ts})
    if bad and n < 200:  # the orphan guarantee for tiny lakes
        feedback.add(BASE.date().isoformat(), f'{{"record_id": "{_uuid4(rng)}", "feedback": "negative", '
                                              f'"was_edited": false, "timestamp": "{BASE.isoformat()}", '
                                              f'"source": "manual"}}')
    feedback.close()
    outcomes.close()
    return sessions


def _outcome(rng, outcomes: _DaySinks, feedback: _DaySinks, enc, ts: datetime, iid: str, prompt_e: str,
             answer_e: str, itype: str, model_json: str, accepted: bool, outcome_session: str) -> None:
    r = rng.random
    when = ts + timedelta(seconds=20 + int(r() * 600), microseconds=int(r() * 1e6))
    x = r()
    if accepted:
        outcome = "accepted" if x < 0.8 else "neutral" if x < 0.93 else "rejected"
    else:
        outcome = "rejected" if x < 0.7 else "neutral" if x < 0.9 else "accepted"
    y = r()
    if y < 0.1:
        strategy: dict = {}
    else:
        graph = y > 0.5
        strategy = {"use_rag": True, "use_graph": graph, "graph_depth": 2 if graph else 0,
                    "vector_weight": 0.5 if graph else 0.7, "graph_weight": 0.3 if graph else 0.0,
                    "fulltext_weight": 0.2 if graph else 0.3, "confidence_threshold": 0.6,
                    "min_k": 3, "max_k": 10 if graph else 8, "max_tokens": 4096 if graph else 2048}
        if y > 0.45:
            strategy["arm_id"] = ARMS[int(r() * len(ARMS))]
    query = json.loads(f'"{prompt_e}"')
    record = {"query": query, "response_summary": json.loads(f'"{answer_e}"')[:200],
              "task_type": TASK_TYPES[itype], "model": json.loads(model_json), "id": _uuid4(rng),
              "timestamp": when.isoformat(), "topic": TOPICS[int(r() * len(TOPICS))],
              "competence_level": COMPETENCE[int(r() * len(COMPETENCE))], "strategy": strategy,
              "outcome": outcome, "inference_reason": _pick(INFERENCE_REASONS[outcome], r),
              "latency_ms": round(100 + r() * 4000, 1), "session_id": outcome_session}
    outcomes.add(when.date().isoformat(), enc(record))
    if outcome != "neutral" and r() < 0.25:  # the bridge: accepted → positive, rejected → negative
        later = when + timedelta(seconds=1)
        feedback.add(later.date().isoformat(),
                     f'{{"record_id": "{iid}", "feedback": "{"positive" if outcome == "accepted" else "negative"}", '
                     f'"was_edited": false, "timestamp": "{later.isoformat()}", "source": "outcome_tracker"}}')


def _bad_template(rng: random.Random) -> dict:
    return {"id": "", "timestamp": "2026-02-02T08:14:03.250000", "interaction_type": "code_generation",
            "input_text": "How do I stream JSON lines from a file in Python?",
            "output_text": "Iterate over the file object: `for line in f:` ✅", "context": "",
            "model": "claude-sonnet-4-5", "tokens_used": 212, "latency_ms": 1432.5, "user_feedback": "none",
            "was_edited": False, "was_accepted": True, "source": "cli",
            "session_id": "3c9d2a51-7f0e-4b6a-9d2c-5e8f1a0b3c4d", "project_context": None}


def _interaction_plants(template: dict) -> dict[int, dict[int, tuple[bytes, str | None]]]:
    """Bad and edge lines for the first interaction files (file ordinal → line → (bytes, reason))."""
    ids = iter(f"0badc0de-0000-4000-8000-{k:012d}" for k in range(1, 100))

    def variant(drop: str | None = None, **changes) -> dict:
        record = dict(template, id=next(ids), **changes)
        if drop:
            record.pop(drop)
        return record

    def raw(record: dict) -> bytes:
        return _dumps(record).encode("utf-8")

    return {
        0: {3: (raw(variant(input_text="café ZZZZ broken")).replace(b"ZZZZ", b"\xff\xfe"), "invalid_utf8"),
            6: (raw(variant())[:90], "invalid_json"),  # a torn write in the middle of the file
            9: (raw(variant()).replace(b'"id": ', b'"id": "a", "id": ', 1), "duplicate_key"),
            12: (b"", None),  # blank lines: counted, not errors
            13: (b" \t ", None)},
        1: {4: (raw(variant(drop="id")), "missing_field:id"),  # the BOM file
            7: (raw(variant(interaction_type="chitchat")), "bad_value:interaction_type")},
        2: {3: (b"null", "not_an_object"),  # the CRLF file
            5: (raw(variant()).replace(b'"latency_ms": 1432.5', b'"latency_ms": NaN'), "non_standard_json")},
        3: {4: (raw(variant(was_accepted="yes")), "bad_type:was_accepted"),
            6: (raw(variant(timestamp="yesterday")), "bad_timestamp:timestamp")},
    }


# ------------------------------------------------------------------------------ legacy log


def _legacy(lake: _Lake, rng: random.Random, n: int) -> None:
    r = rng.random
    days = 3 if n < 1000 else 10
    start = BASE - timedelta(days=45)
    per_day = -(-n // days)
    written = 0
    for d in range(days):
        day = start + timedelta(days=d)
        plants = None
        if lake.bad and d == 0:
            plants = {4: (_dumps({"timestamp": "2025-12-19T10:00:00", "type": "api_call", "model": "gpt-4o",
                                  "tokens_used": "12", "latency_ms": 230.0}).encode(), "bad_type:tokens_used")}
        sink = _Sink(lake, f"interactions/{day.date().isoformat()}_interactions.jsonl", "legacy_log", plants=plants)
        ts = day + timedelta(hours=9)
        for _ in range(min(per_day, n - written)):
            ts += timedelta(seconds=20 + int(r() * 400), microseconds=int(r() * 1e6))
            kind = "interaction" if r() < 0.6 else "api_call" if r() < 0.6 else "pipeline_event"
            session = f"fabrik-{day:%Y%m%d}-{int(r() * 4)}"
            if kind == "interaction":
                task = _pick(TASKS, r)
                row = {"timestamp": ts.isoformat(), "type": kind, "interaction_type": _pick(INTERACTION_TYPES, r),
                       "project": _pick(["fabrik", "fabrik-web", "patina"], r), "session_id": session,
                       "user_input": f"How do I {task}?", "assistant_output": _pick(INTROS, r).format(
                           tool=_pick(TOOLS, r), cause=_pick(CAUSES, r), anti=_pick(ANTIS, r)),
                       "context": {"files": [_pick(["main.py", "lib.rs", "app.ts"], r)]} if r() < 0.5 else None,
                       "reasoning": "matched a known pattern" if r() < 0.5 else None,
                       "lesson_learned": "check the encoding first" if r() < 0.2 else None,
                       "model": _pick(MODELS, r), "tokens_used": 20 + int(r() * 900),
                       "latency_ms": round(50 + r() * 3000, 1),
                       "feedback": _pick([None, None, {"rating": 5}, {"rating": 2, "comment": "too long"}, "👍"], r),
                       "tags": ["legacy", _pick(["python", "rust", "sql"], r)]}
            elif kind == "api_call":
                row = {"timestamp": ts.isoformat(), "type": kind, "session_id": session, "model": _pick(MODELS, r),
                       "endpoint": "/v1/messages", "status": 200 if r() < 0.95 else 529,
                       "tokens_used": 20 + int(r() * 900), "latency_ms": round(50 + r() * 3000, 1)}
            else:
                row = {"timestamp": ts.isoformat(), "type": kind, "project": "fabrik",
                       "event": _pick(["ingest_started", "ingest_complete", "index_rebuilt"], r),
                       "details": {"files": int(r() * 50), "errors": 0}, "tags": ["pipeline"]}
            sink.add(_dumps(row))
            written += 1
        sink.close()


# ------------------------------------------------------------------------------ session ratings


def _session_ratings(lake: _Lake, rng: random.Random, sessions: list[dict]) -> None:
    r = rng.random
    rel = "sessions/session_feedback.sqlite3"
    path = lake.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    midpoint = BASE + timedelta(days=SPAN_DAYS // 2)

    def record(opaque: str, at: datetime, turns: int) -> dict:
        x = r()
        value = {"id": _uuid4(rng), "session_id_opaque": opaque,
                 "user_id_or_null": None if r() < 0.4 else f"u_{rng.getrandbits(32):08x}",
                 "recorded_at": _utc_z(at) if r() < 0.7 else at.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
                 "recorded_date": at.date().isoformat(),
                 "label": "positive" if x < 0.55 else "negative" if x < 0.8 else "skip",
                 "turn_count_at_end": turns, "source": _pick(["cli_end", "cli_end", "cli_exit", "api_end"], r),
                 "schema_version": 1}
        if at >= midpoint:  # newer records: modality lives only inside `value`
            value["schema_version"] = 2
            value["modality"] = "voice" if r() < 0.2 else "text"
        return value

    rows: list[tuple[datetime, dict]] = []
    for i in range(2):  # older than the 180-day retention window
        at = datetime(2025, 6, 10 + i, 17, 3, 9, 120000 * (i + 1))
        rows.append((at, record(hashlib.sha256(f"retired-{i}".encode()).hexdigest(), at, 5 + i)))
    for s in sessions:
        if r() < 0.45:
            continue
        at = s["ended"] + timedelta(minutes=1 + int(r() * 30), microseconds=int(r() * 1e6))
        value = record(hashlib.sha256(s["session_id"].encode()).hexdigest(), at, s["turns"])
        rows.append((at, value))
        if r() < 0.05:  # a double submit: the same record twice
            rows.append((at + timedelta(milliseconds=300), dict(value)))
    for i in range(max(2, len(sessions) // 25)):  # ratings of sessions whose interactions are elsewhere
        at = BASE + timedelta(days=1 + i % SPAN_DAYS, hours=3, seconds=i)
        rows.append((at, record(hashlib.sha256(f"thread-{i}".encode()).hexdigest(), at, 2 + i % 9)))
    rows.sort(key=lambda kv: kv[0])

    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(SESSION_DDL)
        insert = ("insert into session_feedback (id, session_id_opaque, user_id_or_null, recorded_at, "
                  "recorded_date, label, turn_count_at_end, source, schema_version, value) "
                  "values (?,?,?,?,?,?,?,?,?,?)")
        bad_at = len(rows) // 2 if lake.bad else -1
        count = 0
        for k, (_, v) in enumerate(rows):
            if k == bad_at:  # `value` is not JSON (a torn write by an old client)
                cur = conn.execute(insert, (v["id"], v["session_id_opaque"], None, v["recorded_at"],
                                            v["recorded_date"], "skip", 0, "api_end", 1,
                                            '{"id": "' + v["id"] + '", "label": "skip", "recorded_at": '))
                lake.note("session_ratings", rel, cur.lastrowid, None, "invalid_json")
                count += 1
            conn.execute(insert, (v["id"], v["session_id_opaque"], v["user_id_or_null"], v["recorded_at"],
                                  v["recorded_date"], v["label"], v["turn_count_at_end"], v["source"],
                                  v["schema_version"], json.dumps(v)))
            count += 1
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    lake.count("session_ratings", rel, count)


# ------------------------------------------------------------------------------ weighted feedback


def _weighted(lake: _Lake, rng: random.Random, n: int) -> None:
    r = rng.random
    critical = ["Never use .unwrap() in production code", "This leaks the file handle",
                "SQL built by string formatting: injection risk", "Wrong: the timestamps are naive, not UTC"]
    medium = ["Works, but allocates in the hot loop", "Correct but too verbose", "Missing the empty-input case"]
    good = [None, None, "Perfect — exactly the idiom I wanted", "Good answer"]

    def example() -> dict:
        lang = _pick(LANGS, r)
        query = _pick(PROMPT_TEMPLATES[:3], r).format(task=_pick(TASKS, r), lang=lang)
        if r() < 0.1:
            query += " (ünïcödé 👍)"
        w = r()
        weight, note = (10.0, _pick(critical, r)) if w < 0.25 else (3.0, _pick(medium, r)) if w < 0.55 else \
            (1.0, _pick(good, r))
        code = _pick(ANSWER_CODE[lang], r)
        intro = _pick(INTROS, r).format(tool=_pick(TOOLS, r), cause=_pick(CAUSES, r), anti=_pick(ANTIS, r))
        response = f"{intro}\n\n{code}"
        return {"query": query, "response": response, "weight": weight, "feedback": note}

    def compact(e: dict) -> str:
        return json.dumps(e, separators=(",", ":"))

    history = [compact(example()) for _ in range(n)]
    first, second = n // 3, 2 * n // 3
    # Two trainings so far: each renamed the queue to an archive. The live queue was seeded from
    # the last archive's tail (the same lines under two names) and has grown since.
    archives = [("weighted/training_queue_archive_20260214_093012.jsonl", history[:first]),
                ("weighted/training_queue_archive_20260307_181544.jsonl", history[first:second])]
    for rel, lines in archives:
        sink = _Sink(lake, rel, "weighted_queue")
        for line in lines:
            sink.add(line)
        sink.close()
    plants = {2: (b'{"query":"How do I sort a dict by value?","response":"sorted(d.items(), key=lambda kv: kv[1])",'
                  b'"weight":0,"feedback":null}', "bad_value:weight")} if lake.bad else None
    sink = _Sink(lake, "weighted/training_queue.jsonl", "weighted_queue", plants=plants)
    for line in history[second - max(3, n // 20):]:
        sink.add(line)
    sink.close()
    # The older save format: one pretty-printed JSON array with timestamps and tags.
    old = []
    for i in range(8):
        e = example()
        e = {"query": e["query"], "response": e["response"], "feedback": e["feedback"], "weight": e["weight"],
             "timestamp": f"2026-01-{12 + i:02d}T{9 + i:02d}:{(7 * i) % 60:02d}:00Z" if i % 2 else
             f"2026-01-{12 + i:02d}T{9 + i:02d}:{(7 * i) % 60:02d}:00+00:00",
             "tags": {10.0: ["critical"], 3.0: ["medium", "style"], 1.0: ["good"]}[e["weight"]]}
        old.append(e)
    rel = "weighted/training_queue_old.jsonl"
    (lake.root / rel).write_text(json.dumps(old, indent=2) + "\n", encoding="utf-8")
    lake.count("weighted_queue", rel, len(old))

    plants = {5: (b'{"timestamp": 1770300000, "query": "Is this regex right?", "response": "Yes.", '
                  b'"rating": "meh", "weight": 1.0}', "bad_value:rating")} if lake.bad else None
    sink = _Sink(lake, "weighted/feedback.jsonl", "weighted_ratings", plants=plants)
    at = _epoch(BASE) + 3600
    for i in range(max(30, n * 2 // 3)):
        at += 60 + int(r() * 4 * 3600 * 60 / max(n, 60))
        e = example()
        bad = r() < 0.35
        row = {"timestamp": at, "query": e["query"], "response": e["response"], "rating": "bad" if bad else "good",
               "weight": 10.0 if bad and r() < 0.6 else 1.0}
        if r() < 0.5:
            row["note"] = _pick(critical if bad else ["spot on", "clear and short", "nice, thanks 🙌"], r)
        sink.add(json.dumps(row))
    sink.close()


# ------------------------------------------------------------------------------ eventlog

AREAS = {
    "scry": ["src/commands/scry/mod.rs", "src/commands/scry/internal/search.rs",
             "src/commands/scry/internal/query_log.rs", "src/retrieval/engine.rs", "src/query/fusion.rs",
             "src/retrieval/oracles/semantic.rs"],
    "eventlog": ["src/db/event_log.rs", "src/db/schema.sql", "src/commands/scrape/git/mod.rs",
                 "src/commands/scrape/git/commits.rs", "src/commands/scrape/sessions.rs"],
    "secrets": ["src/secrets/mod.rs", "src/secrets/internal.rs", "src/commands/secrets.rs", "src/paths.rs",
                "layer/surface/build/spec-secrets-boundary.md"],
    "mcp": ["src/mcp/server.rs", "src/mcp/tools.rs", "src/main.rs", "src/lib.rs", "src/commands/mod.rs"],
    "eval": ["src/eval/feedback_loop.rs", "src/eval/metrics.rs", "src/commands/eval/mod.rs",
             "layer/core/build.md", "tests/eval_feedback_test.rs"],
    "docs": ["README.md", "layer/core/build.md", "docs/design/session_model.md", "CHANGELOG.md", "Cargo.toml"],
}
AREA_QUERIES = {
    "scry": ["how does scry fuse oracle results", "where are query results ranked", "scry query log format"],
    "eventlog": ["where is the eventlog schema defined", "git scraper numstat parsing", "session tag scraping"],
    "secrets": ["1password vault integration", "where do secrets paths live", "ssh agent support for secrets"],
    "mcp": ["mcp server tool registration", "how are CLI commands wired", "main entry point"],
    "eval": ["feedback loop precision metrics", "how is recall computed", "eval command output"],
    "docs": ["build roadmap", "session model design", "release notes"],
}
PERSONAS = ["persona:rust-style", "persona:prefers_small_commits", "persona:testing-discipline"]
FACT_KINDS = ["fn:main", "fn:search", "struct:EventLog", "fn:run", "impl:Oracle"]
TITLES = ["wire scry feedback", "eventlog re-scrape fix", "secrets boundary v1", "mcp gate", "eval precision",
          "docs refresh", "rename retrieval module", "flaky test hunt"]
AUTHORS = [("NicabarNimble", "dev@example.invalid", None), ("Ana Souza", "ana@example.invalid", 1)]


def _local_offset(at: datetime) -> timedelta:
    """US Eastern: -05:00, -04:00 from 2026-03-08 02:00 local (the lake crosses the change)."""
    return timedelta(hours=-4) if at >= datetime(2026, 3, 8, 2) else timedelta(hours=-5)


def _with_offset(local: datetime, offset: timedelta) -> str:
    return local.replace(tzinfo=timezone(offset)).isoformat()


def _f32(x: float) -> float:
    return struct.unpack("f", struct.pack("f", x))[0]


def _nanos(utc: datetime, rng: random.Random) -> str:
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{rng.getrandbits(30) % 10**9:09d}+00:00"


def _eventlog(lake: _Lake, rng: random.Random, n_sessions: int) -> None:
    r = rng.random
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    events: list[tuple[str, str, str, str | None, str]] = []
    commits: list[tuple] = []
    gap = SPAN_DAYS * 86400 / n_sessions
    prev_sid = None
    head = f"{rng.getrandbits(160):040x}"
    for s in range(n_sessions):
        local = BASE + timedelta(seconds=int(s * gap + r() * gap * 0.3))
        local = local.replace(microsecond=0)
        offset = _local_offset(local)
        utc = local - offset
        sid = local.strftime("%Y%m%d-%H%M%S")
        adapter = "-claude" if local >= BASE + timedelta(days=20) and r() < 0.5 else ""
        area = _pick(list(AREAS), r)
        files = AREAS[area]
        touched = rng.sample(files, k=min(len(files), 1 + int(r() * 3)))
        duration = timedelta(minutes=40 + int(r() * 200))
        no_end = s == 3 or s % 200 == 150
        title = _pick(TITLES, r)
        session_events: list[tuple[datetime, tuple]] = []
        tag = f"session-{sid}{adapter}-start"
        session_events.append((utc, ("git.tag", _with_offset(local, offset), tag, None, json.dumps(
            {"tag_name": tag, "sha": head, "tag_date": _with_offset(local, offset), "tagger_name": "NicabarNimble",
             "message": f"Session start: {title}"}, **compact))))
        session_events.append((utc, ("session.started", _nanos(utc, rng), sid, f"layer/sessions/{sid}.md",
                                     json.dumps({"session_id": sid, "title": title,
                                                 "adapter": "claude" if adapter else "gemini"}, **compact))))
        # queries: v1 before the switch to query ids, v2 after
        v2 = local >= BASE + timedelta(days=12)
        for q in range(1 + int(r() * 3)):
            q_utc = utc + timedelta(minutes=3 + 12 * q + int(r() * 10))
            stamp = _nanos(q_utc, rng)
            graph = v2 and r() < 0.3
            pool = [f for f in files if f not in touched]
            chosen = []
            for f in touched:
                if r() < 0.55:
                    chosen.append(f)
            chosen += rng.sample(pool, k=min(len(pool), 1 + int(r() * 3)))
            other_area = AREAS[_pick(list(AREAS), r)]
            chosen.append(_pick(other_area, r))
            rng.shuffle(chosen)
            chosen = list(dict.fromkeys(chosen))
            results = []
            score = 0.95 - r() * 0.1
            for rank, path in enumerate(chosen, start=1):
                doc = path
                if path.endswith(".rs") and r() < 0.3:
                    doc = f"./{path}::{_pick(FACT_KINDS, r)}"
                item = {"doc_id": doc, "score": _f32(score), "rank": rank,
                        "event_type": "code.function" if "::" in doc else "code.file"}
                results.append(item)
                score -= 0.02 + r() * 0.08
            if prev_sid and r() < 0.4:
                results.append({"doc_id": prev_sid, "score": _f32(score), "rank": len(results) + 1,
                                "event_type": "session"})
                score -= 0.05
            if r() < 0.25:
                results.append({"doc_id": _pick(PERSONAS, r), "score": _f32(max(score, 0.05)),
                                "rank": len(results) + 1, "event_type": "persona"})
            if graph:
                for item in results:
                    item["source_repo"] = _pick(["patina", "patina", "dojo"], r)
                    item["weight"] = round(0.5 + r() * 0.5, 2)
            mode = "graph" if graph else _pick(["semantic", "hybrid", "lexical"], r)
            data = {"query": _pick(AREA_QUERIES[area], r), "mode": mode,
                    "session_id": sid, "results": results}
            if v2:
                xyz = "".join(_pick("abcdefghijklmnopqrstuvwxyz0123456789", r) for _ in range(3))
                qid = f"q_{q_utc:%Y%m%d_%H%M%S}_{xyz}"
                data = {"query_id": qid, **data}
                if graph:
                    data["routing"] = {"strategy": "graph", "repos": ["patina", "dojo"], "hops": 2}
                session_events.append((q_utc, ("scry.query", stamp, qid, None, json.dumps(data, **compact))))
                if r() < 0.5:
                    used = _pick(results, r)
                    u_utc = q_utc + timedelta(seconds=20 + int(r() * 200))
                    session_events.append((u_utc, ("scry.use", _nanos(u_utc, rng), qid, None, json.dumps(
                        {"query_id": qid, "result_used": used["doc_id"], "rank": used["rank"],
                         "session_id": sid if r() < 0.8 else None}, **compact))))
                if r() < 0.3:
                    f_utc = q_utc + timedelta(seconds=240 + int(r() * 200))
                    session_events.append((f_utc, ("scry.feedback", _nanos(f_utc, rng), qid, None, json.dumps(
                        {"query_id": qid, "signal": "good" if r() < 0.6 else "bad",
                         "comment": _pick([None, None, "exactly the file I needed", "stale result", "wrong repo"], r),
                         "session_id": sid if r() < 0.8 else None}, **compact))))
            else:
                session_events.append((q_utc, ("scry.query", stamp, stamp, None, json.dumps(data, **compact))))
        # commits: together they touch `touched`; some carry the session id, others are claimed by
        # the tag window (compared as instants: a co-author's commit carries another offset)
        n_commits = 1 + int(r() * 3)
        for c in range(n_commits):
            c_local = local + timedelta(minutes=20 + c * (duration.seconds // 60 - 25) // n_commits,
                                        seconds=int(r() * 59))
            sha = f"{rng.getrandbits(160):040x}"
            author, email, hours = _pick(AUTHORS, r)
            c_off = offset if hours is None else timedelta(hours=hours)
            c_text = _with_offset(c_local - offset + c_off, c_off)
            mine = touched[c::n_commits] or [touched[-1]]
            changes = [{"path": p, "change_type": "modified" if r() < 0.8 else "added",
                        "lines_added": 1 + int(r() * 120), "lines_removed": int(r() * 40)} for p in mine]
            if c == 0 and (s == 2 or area == "scry" and r() < 0.5):
                changes.append({"path": "src/{retrieval => query}/fusion.rs", "change_type": "modified",
                                "lines_added": 4, "lines_removed": 4})
            if c == 0 and (s == 1 or area == "docs" and r() < 0.5):
                changes.append({"path": "docs/session_notes_old.md => docs/design/session_model.md",
                                "change_type": "modified", "lines_added": 0, "lines_removed": 0})
            message = f"{_pick(['feat', 'fix', 'refactor', 'docs', 'test'], r)}({area}): {title} part {c + 1}"
            data = {"sha": sha, "message": message, "author_name": author, "author_email": email, "files": changes}
            if r() < 0.35:
                data["session_id"] = sid + adapter
            event = ("git.commit", c_text, sha, None, json.dumps(data, **compact))
            session_events.append((c_local - offset, event))
            commits.append((event, data, area))
            head = sha
        end_local = local + duration
        if not no_end:
            archive = f"{rng.getrandbits(160):040x}"
            end_offset = _local_offset(end_local)
            end_utc, end_text = end_local - end_offset, _with_offset(end_local, end_offset)
            files = [{"path": f"layer/sessions/{sid}.md", "change_type": "added",
                      "lines_added": 60 + int(r() * 40), "lines_removed": 0}]
            data = {"sha": archive, "message": f"session-end: archive session {sid}", "author_name": AUTHORS[0][0],
                    "author_email": AUTHORS[0][1], "files": files}
            session_events.append((end_utc, ("git.commit", end_text, archive, None, json.dumps(data, **compact))))
            tag = f"session-{sid}{adapter}-end"
            tag_data = {"tag_name": tag, "sha": archive, "tag_date": end_text, "tagger_name": "NicabarNimble",
                        "message": f"Session end: {title}"}
            after = end_utc + timedelta(seconds=1)
            session_events.append((after, ("git.tag", end_text, tag, None, json.dumps(tag_data, **compact))))
            session_events.append((after, ("session.ended", _nanos(end_utc, rng), sid, f"layer/sessions/{sid}.md",
                                           json.dumps({"session_id": sid}, **compact))))
            head = archive
        session_events.sort(key=lambda kv: kv[0])
        events += [e for _, e in session_events]
        prev_sid = sid
    # a re-scrape appends some commits again (a higher seq wins; the new scraper adds `parsed`)
    for event, data, area in commits[1::9]:
        kind, _, rest = data["message"].partition("(")
        again = dict(data, parsed={"type": kind, "scope": area, "subject": rest.split("): ", 1)[-1]})
        events.append(event[:4] + (json.dumps(again, **compact),))

    rel = "eventlog/patina.db"
    path = lake.root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    conn = sqlite3.connect(path)
    try:
        conn.execute(EVENTLOG_DDL)
        conn.executemany("insert into eventlog (event_type, timestamp, source_id, source_file, data) "
                         "values (?,?,?,?,?)", events)
        conn.commit()
    finally:
        conn.close()
    lake.count("eventlog", rel, len(events))

    # A JSONL export from a second machine: same columns, `data` a string holding the JSON.
    local = BASE + timedelta(days=SPAN_DAYS, hours=2)
    offset = _local_offset(local)
    utc = local - offset
    sid = local.strftime("%Y%m%d-%H%M%S")
    sha = f"{rng.getrandbits(160):040x}"
    q_utc = utc + timedelta(minutes=4)
    qid = f"q_{q_utc:%Y%m%d_%H%M%S}_x7k"
    rows = [
        ("git.tag", _with_offset(local, offset), f"session-{sid}-start", None,
         {"tag_name": f"session-{sid}-start", "sha": head, "tag_date": _with_offset(local, offset),
          "tagger_name": "NicabarNimble", "message": "Session start: export check"}),
        ("scry.query", _nanos(q_utc, rng), qid, None,
         {"query_id": qid, "query": "where is the eventlog schema defined", "mode": "hybrid", "session_id": sid,
          "results": [{"doc_id": "./src/db/event_log.rs::struct:EventLog", "score": _f32(0.91), "rank": 1,
                       "event_type": "code.function"},
                      {"doc_id": "src/db/schema.sql", "score": _f32(0.84), "rank": 2, "event_type": "code.file"},
                      {"doc_id": "persona:prefers_small_commits", "score": _f32(0.2), "rank": 3,
                       "event_type": "persona"}]}),
        ("scry.use", _nanos(q_utc + timedelta(seconds=40), rng), qid, None,
         {"query_id": qid, "result_used": "src/db/schema.sql", "rank": 2, "session_id": sid}),
        ("git.commit", _with_offset(local + timedelta(minutes=30), offset), sha, None,
         {"sha": sha, "message": "fix(eventlog): index the timestamp column", "author_name": AUTHORS[0][0],
          "author_email": AUTHORS[0][1], "session_id": sid,
          "files": [{"path": "src/db/schema.sql", "change_type": "modified", "lines_added": 3, "lines_removed": 0}]}),
    ]
    sink = _Sink(lake, "eventlog/export.jsonl", "eventlog",
                 plants={3: (json.dumps({"seq": 3, "event_type": "scry.feedback", "timestamp": _nanos(q_utc, rng),
                                         "source_id": qid, "source_file": None,
                                         "data": '{"query_id": "' + qid + '", "signal": "go'}).encode(),
                             "bad_value:data")} if lake.bad else None)
    for seq, (etype, stamp, source_id, source_file, data) in enumerate(rows, start=1):
        sink.add(json.dumps({"seq": seq, "event_type": etype, "timestamp": stamp, "source_id": source_id,
                             "source_file": source_file, "data": json.dumps(data, **compact)}))
    if commits:  # the same commit as in the database, exported again
        event = commits[-1][0]
        sink.add(json.dumps({"seq": len(rows) + 1, "event_type": event[0], "timestamp": event[1],
                             "source_id": event[2], "source_file": event[3], "data": event[4]}))
    sink.close()


# ------------------------------------------------------------------------------ signals


def _signals(lake: _Lake, rng: random.Random, n: int) -> None:
    r = rng.random
    end = BASE + timedelta(days=SPAN_DAYS)
    concepts = ["entropy", "information theory", "energy flow", "Navier–Stokes regularity", "Ricci flow",
                "symbiosis", "graph neural network"]
    chunks = [_uuid4(rng) for _ in range(max(8, n // 6))]
    aspects = ["classification", "content", "relevance", "extraction", "accuracy"]
    rows: list[dict] = []

    def signal(target: str, aspect: str, kind: str, strength: float, source: str, created: datetime,
               context: str = "") -> None:
        target_type = "concept" if target in concepts else "chunk"
        original = suggested = None
        if aspect == "classification":
            original = _pick(["STM", "LONGTERM", None], r)
            if kind in ("bad", "incorrect"):
                suggested = _pick(["LONGTERM", "DISCARD", "STM"], r)
        created = created.replace(microsecond=created.microsecond or 1)
        skewed = created - timedelta(hours=1)
        rows.append({"id": _uuid4(rng),
                     "timestamp": _epoch(skewed.replace(microsecond=0)) * 1000 + skewed.microsecond // 1000,
                     "signal": kind, "strength": strength, "context": context,
                     "session_id": None if r() < 0.85 else f"sess-{rng.getrandbits(24):06x}", "source": source,
                     "created_at": created.isoformat(), "target_type": target_type, "target_id": target,
                     "aspect": aspect, "original_class": original, "suggested_class": suggested})

    def when(days_before_end: float) -> datetime:
        return end - timedelta(days=days_before_end, seconds=int(r() * 3600), microseconds=int(r() * 1e6))

    # promotion candidates: two strong positives, one of them manual (recent)
    for target in [chunks[0], "entropy", chunks[1]]:
        signal(target, "relevance", "good", 1.0, "manual", when(3), "Key insight, keep it")
        signal(target, "content", "correct", 0.9, _pick(["heuristic", "llm_agreement"], r), when(2))
    # not candidates: automated sources only; one strong positive alone; a weak manual one
    signal(chunks[2], "relevance", "good", 0.95, "heuristic", when(4))
    signal(chunks[2], "content", "good", 0.9, "llm_agreement", when(3))
    signal(chunks[3], "relevance", "good", 1.0, "manual", when(2), "Only one voice")
    signal(chunks[4], "relevance", "good", 0.65, "manual", when(5))
    signal(chunks[4], "content", "correct", 0.6, "heuristic", when(5))
    # supersession: an opinion replaced by a later one on the same (target, aspect)
    signal(chunks[5], "classification", "good", 0.8, "heuristic", when(20), "Looks like STM")
    signal(chunks[5], "classification", "incorrect", 1.0, "manual", when(10), "Actually long-term knowledge")
    signal("information theory", "accuracy", "bad", 0.7, "llm_agreement", when(15))
    signal("information theory", "accuracy", "correct", 1.0, "manual", when(6), "Fixed upstream")
    # conflicts: current opinions of one target disagree across aspects (and a good/bad pair)
    signal(chunks[6], "relevance", "good", 0.9, "manual", when(8), "Relevant to the query")
    signal(chunks[6], "accuracy", "bad", 0.85, "manual", when(7), "But the numbers are wrong")
    signal("Navier–Stokes regularity", "content", "good", 0.8, "heuristic", when(9))
    signal("Navier–Stokes regularity", "extraction", "incorrect", 0.9, "manual", when(9), "Équation mal extraite")
    signal(chunks[7], "content", "good", 1.0, "manual", when(12))
    signal(chunks[7], "content", "bad", 1.0, "manual", when(12))
    targets = chunks + concepts
    while len(rows) < n:
        x = r()
        kind = "good" if x < 0.3 else "correct" if x < 0.45 else "bad" if x < 0.65 else "incorrect" if x < 0.78 \
            else "unsure" if x < 0.9 else "neutral"
        signal(_pick(targets, r), _pick(aspects, r), kind, _pick([1.0, 1.0, 0.9, 0.8, 0.75, 0.6, 0.5, 0.3], r),
               _pick(["manual", "heuristic", "heuristic", "llm_agreement"], r), when(r() * SPAN_DAYS),
               _pick(["", "", "Correctly identified as STM", "Needs more context", "Duplicate of another chunk",
                      "Good bootstrap example"], r))
    rows.sort(key=lambda row: row["created_at"])  # the buffer is append-only

    plants = {8: (json.dumps({"id": "5e0a7d3c-2b1f-4e6d-9c8b-7a6f5e4d3c2b", "timestamp": 1770000000000,
                              "signal": "good", "strength": 1.5, "context": "", "session_id": None,
                              "source": "manual", "created_at": "2026-02-02T03:40:00.000001",
                              "target_type": "chunk", "target_id": chunks[0], "aspect": "content",
                              "original_class": None, "suggested_class": None}).encode(),
                  "bad_value:strength")} if lake.bad else None
    sink = _Sink(lake, "signals/feedback_buffer.jsonl", "signals", plants=plants)
    for row in REAL_SIGNAL_ROWS:
        sink.add(row)
    for row in rows:
        sink.add(json.dumps(row))
    sink.close()
