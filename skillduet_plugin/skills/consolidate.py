"""Global consolidation of one scope: deduplicate recent Local candidates, keep the top share by the selector,
merge them into the current Global with the synthesizer, and compress hierarchically to the token budget.

Every step is a function over plain data; each candidate that does not make it says why (``reason`` is one of
``duplicate``, ``near_duplicate``, ``below_top_k``), and a synthesizer failure degrades to "current Global plus
kept skills" instead of stopping training (``fallback``). Every request asks for a reply budget sized to what
its answer can use: a synthesis at most the Global's token budget, a compression at most its input's tokens,
plus :data:`REPLY_MARGIN_TOKENS` for the tags.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from skillduet_plugin.core.scores import select_top
from skillduet_plugin.core.selectors import get_selector
from skillduet_plugin.llm.base import ChatRequest
from skillduet_plugin.llm.offline_common import GAME_LINE_PREFIX
from skillduet_plugin.skills.budget import count_tokens, truncate_lines
from skillduet_plugin.skills.judge import judge_global_items, parse_global_answer
from skillduet_plugin.skills.near_duplicates import first_near_duplicates
from skillduet_plugin.skills.prompts import render as render_prompt
from skillduet_plugin.skills.sanitize import cap_length, degenerate_reason, strip_control_tokens
from skillduet_plugin.skills.similarity import SimilarityFn, lexical_matrix
from skillduet_plugin.skills.types import GlobalSkills, Skill, normalize_text

#: reply tokens on top of an answer's own size: the <global> tags and a short lead-in
REPLY_MARGIN_TOKENS = 32
THEME_THRESHOLD = 0.25  # lexical similarity that puts two Global items in one theme group
MAX_THEME_GROUP = 6
MAX_COMPRESS_ROUNDS = 4


@dataclass
class ConsolidationReport:
    """What one consolidation of one scope did. ``rejected`` entries: ``{"skill_id", "reason", "detail"}``."""

    scope: str
    step: int
    selector: str
    n_candidates: int
    kept: list[str] = field(default_factory=list)
    rejected: list[dict[str, str]] = field(default_factory=list)
    items: list[str] = field(default_factory=list)
    tokens: int = 0
    budget_tokens: int = 0
    parent_version: int | None = None
    version: int | None = None
    synthesizer_failures: int = 0
    #: the Global is the current one plus the kept skills as items, not the synthesizer's merge (it failed)
    fallback: bool = False
    compress_rounds: int = 0
    dropped_items: list[str] = field(default_factory=list)
    #: sentences the judge left out of the items (``{"reason", "text"}``): one game's object ids or task, structure
    judged_out: list[dict[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def render_global(items: Sequence[str]) -> str:
    """The Global's text: one ``- item`` line per item."""
    return "\n".join(f"- {item}" for item in items)


def selector_rng(seed: int, step: int, scope: str) -> random.Random:
    """The Random selector's generator, a pure function of (seed, step, scope) so resumes repeat it."""
    digest = hashlib.sha256(f"{seed}:{step}:{scope}".encode()).hexdigest()
    return random.Random(int(digest[:16], 16))


def _score(skill: Skill, selector: str) -> float | None:
    value = skill.scores.get(get_selector(selector).score)
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def _rank_key(skill: Skill, selector: str) -> tuple[int, float, int, str]:
    s = _score(skill, selector)
    # scored before unscored, higher first; then the newer candidate; then id (input-order independent)
    return (1, 0.0, -skill.step, skill.skill_id) if s is None else (0, -s, -skill.step, skill.skill_id)


def dedupe(candidates: Sequence[Skill], *, selector: str, threshold: float,
           similarity: SimilarityFn | None = None) -> tuple[list[Skill], list[dict[str, str]]]:
    """Drop exact duplicates (same fingerprint) then near-duplicates (similarity >= ``threshold``); of each set
    of duplicates the higher-scored candidate stays. Returns ``(unique, rejected)``, unique in rank order."""
    ranked = sorted(candidates, key=lambda s: _rank_key(s, selector))
    rejected: list[dict[str, str]] = []
    seen: dict[str, Skill] = {}
    exact: list[Skill] = []
    for s in ranked:
        if s.skill_id in seen:
            rejected.append({"skill_id": s.skill_id, "reason": "duplicate",
                             "detail": f"same text as the step-{seen[s.skill_id].step} candidate"})
            continue
        seen[s.skill_id] = s
        exact.append(s)
    if len(exact) < 2:
        return exact, rejected
    if similarity is None:
        # The lexical similarity, vectorised: thousands of candidates since the last consolidation are
        # O(n^2) pairs, too many for a Python loop per pair; the decisions are the loop's below.
        matches = first_near_duplicates([s.text for s in exact], threshold)
    else:
        matches = _greedy_matches(similarity([s.text for s in exact]), threshold)
    kept_idx: list[int] = []
    for i, best, sim in matches:
        if best is not None:
            rejected.append({"skill_id": exact[i].skill_id, "reason": "near_duplicate",
                             "detail": f"similarity {sim:.3f} to {exact[best].skill_id}"})
            continue
        kept_idx.append(i)
    return [exact[i] for i in kept_idx], rejected


def _greedy_matches(sims: Sequence[Sequence[float]], threshold: float) -> list[tuple[int, int | None, float]]:
    """``(i, j, sims[i][j])`` with ``j`` the most similar earlier kept item when it reaches ``threshold`` (then
    ``i`` is not kept), else ``(i, None, 0.0)``; see ``near_duplicates.first_near_duplicates``."""
    out: list[tuple[int, int | None, float]] = []
    kept_idx: list[int] = []
    for i in range(len(sims)):
        best = max(kept_idx, key=lambda j: sims[i][j], default=None)
        if best is not None and sims[i][best] >= threshold:
            out.append((i, best, float(sims[i][best])))
        else:
            kept_idx.append(i)
            out.append((i, None, 0.0))
    return out


def select(unique: Sequence[Skill], *, selector: str, keep_ratio: float, seed: int, step: int,
           scope: str) -> tuple[list[Skill], list[dict[str, str]]]:
    """Keep the top ``keep_ratio`` share by the selector's cached score (``core.scores.select_top``)."""
    ids = [s.skill_id for s in unique]
    shuffle = get_selector(selector).shuffle
    scores = [None if shuffle else _score(s, selector) for s in unique]
    rng = selector_rng(seed, step, scope) if shuffle else None
    kept_ids, rejected_ids = select_top(ids, scores, keep_ratio, rng=rng, shuffle=shuffle)
    by_id = {s.skill_id: s for s in unique}
    rejected = [{"skill_id": sid, "reason": "below_top_k",
                 "detail": f"{selector}={_fmt(_score(by_id[sid], selector))}, keep_ratio={keep_ratio}"}
                for sid in rejected_ids]
    return [by_id[sid] for sid in kept_ids], rejected


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.6g}"


def clean_items(items: Sequence[str], max_chars: int, special_tokens: Sequence[str] = ()) -> list[str]:
    """Sanitise Global items: control tokens out, one line each, capped, degenerate and repeated ones dropped."""
    out: list[str] = []
    seen: set[str] = set()
    for item in items:
        text = " ".join(strip_control_tokens(str(item), special_tokens).split())
        text = cap_length(text.lstrip("-*• ").strip(), max_chars)
        key = normalize_text(text)
        if degenerate_reason(text) is None and key not in seen:
            seen.add(key)
            out.append(text)
    return out


def skill_as_item(skill: Skill) -> str:
    """A Local skill flattened to one Global item (the fallback when the synthesizer fails), without its lines
    that hold for one game only (``GAME_LINE_PREFIX``: a Global stays class-level)."""
    lines = [ln.strip().lstrip("-*• ").strip() for ln in skill.text.splitlines() if ln.strip()]
    return "; ".join(ln for ln in lines if not ln.startswith(GAME_LINE_PREFIX))


def _class_level(items: list[str], candidates: Sequence[Skill], report: ConsolidationReport) -> list[str]:
    """``items`` without what holds for one game of ``candidates`` (its object ids, its task sentence) or is the
    prompt's structure (``skills.judge.judge_global_items``); what was left out goes into the report."""
    meta = [s.metadata or {} for s in candidates]
    kept, dropped = judge_global_items(items, instance_terms=[t for m in meta for t in m.get("instance_terms", ())],
                                       tasks=[str(m.get("task", "")) for m in meta])
    report.judged_out.extend({"reason": reason, "text": text} for reason, text in dropped)
    return kept


def theme_groups(items: Sequence[str]) -> list[list[int]]:
    """Indices of items grouped by theme (greedy lexical clustering, groups of at most ``MAX_THEME_GROUP``).
    When every item is its own theme, neighbours are paired so compression can still make progress."""
    sims = lexical_matrix(items)
    groups: list[list[int]] = []
    for i in range(len(items)):
        best = max((g for g in groups if len(g) < MAX_THEME_GROUP), key=lambda g: sims[i][g[0]], default=None)
        if best is not None and sims[i][best[0]] >= THEME_THRESHOLD:
            best.append(i)
        else:
            groups.append([i])
    if all(len(g) == 1 for g in groups) and len(items) > 1:
        groups = [list(range(i, min(i + 2, len(items)))) for i in range(0, len(items), 2)]
    return groups


def compress(items: list[str], *, scope: str, budget: int, backend: Any, tokenizer: Any = None,
             max_chars: int = 4000, special_tokens: Sequence[str] = ()) -> tuple[list[str], int, list[str], int]:
    """Compress ``items`` until their rendered text fits ``budget`` tokens.

    Rounds of: group by theme, summarise each multi-item group to half its size with one ``compress`` request
    per group (all of a round in one ``generate`` call), merge. When a round makes no progress, or after
    ``MAX_COMPRESS_ROUNDS``, the lowest-priority items (the end of the list: the synthesizer puts the most
    important first) are dropped, and a last single item is cut at a line/word boundary.
    Returns ``(items, rounds, dropped_items, failures)``.
    """
    rounds, failures = 0, 0
    dropped: list[str] = []

    def tokens(xs: Sequence[str]) -> int:
        return count_tokens(render_global(xs), tokenizer)

    while tokens(items) > budget and rounds < MAX_COMPRESS_ROUNDS and len(items) > 1:
        groups = theme_groups(items)
        multi = [g for g in groups if len(g) > 1]
        requests = []
        for g in multi:
            target = max(1, len(g) // 2)
            group_items = [items[i] for i in g]
            system, user = render_prompt("compress", scope=scope, target_items=str(target),
                                         items=render_global(group_items))
            messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
            requests.append(ChatRequest(messages, {"kind": "compress", "scope": scope, "items": group_items,
                                                   "target_items": target},
                                        tokens(group_items) + REPLY_MARGIN_TOKENS))
        answers = backend.generate(requests) if requests else []
        replaced: dict[int, list[str]] = {}
        for g, answer in zip(multi, answers):
            parsed = parse_global_answer(answer)
            new = clean_items(parsed or [], max_chars, special_tokens)[: max(1, len(g) // 2)]
            if not new:
                failures += 1
                continue
            replaced[g[0]] = new
        merged: list[str] = []
        in_group = {i for g in multi for i in g if g[0] in replaced}
        for i, item in enumerate(items):
            if i in replaced:
                merged.extend(replaced[i])
            elif i not in in_group:
                merged.append(item)
        merged = clean_items(merged, max_chars, special_tokens)
        rounds += 1
        if tokens(merged) >= tokens(items):
            break
        items = merged
    while tokens(items) > budget and len(items) > 1:
        dropped.append(items.pop())
    if items and tokens(items) > budget:
        # render_global adds "- " (about one token): leave it room.
        cut, _ = truncate_lines(items[0], max(1, budget - 2), tokenizer)
        items = [cut] if cut.strip() else []
        if not items:
            dropped.append(cut)
    return items, rounds, dropped, failures


def consolidate_scope(scope: str, candidates: Sequence[Skill], current: GlobalSkills, *, step: int, selector: str,
                      keep_ratio: float, dedupe_threshold: float, seed: int, budget_tokens: int, synthesizer: Any,
                      tokenizer: Any = None, max_chars: int = 4000, special_tokens: Sequence[str] = (),
                      similarity: SimilarityFn | None = None) -> ConsolidationReport:
    """Dedupe -> select -> synthesize -> compress for one scope; the report carries the new items."""
    report = ConsolidationReport(scope=scope, step=step, selector=selector, n_candidates=len(candidates),
                                 budget_tokens=budget_tokens, parent_version=current.version)
    unique, rejected = dedupe(candidates, selector=selector, threshold=dedupe_threshold, similarity=similarity)
    kept, below = select(unique, selector=selector, keep_ratio=keep_ratio, seed=seed, step=step, scope=scope)
    report.kept = [s.skill_id for s in kept]
    report.rejected = rejected + below
    current_items = list(current.items)
    new_texts = [s.text for s in kept]
    items: list[str] | None = None
    if new_texts:
        system, user = render_prompt("synthesize", scope=scope, budget_tokens=str(budget_tokens),
                                     current=render_global(current_items) or "(empty)",
                                     new="\n\n".join(f"### Skill {i + 1}\n{t}" for i, t in enumerate(new_texts)))
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        answer = synthesizer.generate([ChatRequest(messages, {
            "kind": "synthesize", "scope": scope, "current": current_items, "new": new_texts,
            "budget_tokens": budget_tokens}, budget_tokens + REPLY_MARGIN_TOKENS)])[0]
        parsed = clean_items(parse_global_answer(answer) or [], max_chars, special_tokens)
        if parsed:
            items = parsed
        else:
            report.synthesizer_failures += 1
            report.notes.append("synthesizer_failed:" + ("no_answer" if answer is None else "no_items"))
    if items is None:
        report.fallback = bool(kept)
        items = clean_items(current_items + [skill_as_item(s) for s in kept], max_chars, special_tokens)
    items = _class_level(items, candidates, report)
    items, rounds, dropped, failures = compress(items, scope=scope, budget=budget_tokens, backend=synthesizer,
                                                tokenizer=tokenizer, max_chars=max_chars,
                                                special_tokens=special_tokens)
    items = _class_level(items, candidates, report)
    report.compress_rounds = rounds
    report.dropped_items = dropped
    report.synthesizer_failures += failures
    if dropped:
        report.notes.append(f"dropped_over_budget:{len(dropped)}")
    report.items = items
    report.tokens = count_tokens(render_global(items), tokenizer)
    return report


#: synthesizer backends whose calls wait on a server: consolidation runs their scopes concurrently
CONCURRENT_BACKENDS = ("openai",)


def consolidate_scopes(jobs: Sequence[tuple[str, list[Skill], GlobalSkills]], *, step: int, config: Any,
                       synthesizer: Any, tokenizer: Any = None, special_tokens: Sequence[str] = (),
                       similarity: SimilarityFn | None = None) -> list[ConsolidationReport]:
    """:func:`consolidate_scope` for each ``(scope, candidates, current Global)`` job with the method's settings
    (``config``: a ``SkillDuetConfig``), one report per job in job order."""

    def one(job: tuple[str, list[Skill], GlobalSkills]) -> ConsolidationReport:
        return consolidate_scope(
            job[0], job[1], job[2], step=step, selector=config.selector, keep_ratio=config.keep_ratio,
            dedupe_threshold=config.dedupe_threshold, seed=config.seed, budget_tokens=config.skill_token_budget,
            synthesizer=synthesizer, tokenizer=tokenizer, max_chars=config.max_skill_chars,
            special_tokens=special_tokens, similarity=similarity)

    workers = min(len(jobs), int(config.synthesizer.concurrency)) \
        if getattr(synthesizer, "kind", "") in CONCURRENT_BACKENDS else 1
    if workers <= 1:
        return [one(job) for job in jobs]
    # Scopes are independent: a remote synthesizer answers one scope's merge and compress rounds while it works
    # on the others', so the trainer waits about one scope's round trips, not one per scope.
    with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="skillduet-consolidate") as pool:
        return list(pool.map(one, jobs))
