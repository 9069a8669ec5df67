"""Choose mode: the policy picks among admissible actions by scoring each one's response; tokens as generated."""

from __future__ import annotations

import pytest
import torch

from skillduet_plugin.rollout.choice import action_response, candidate_logprobs, hf_choice_fn
from skillduet_plugin.rollout.collector import Generation, run_episodes
from skillduet_plugin.rollout.engine import decisive_mask
from skillduet_plugin.core.conversation import ChatTokenizer
from skillduet_testing.toy_pool import ToyStepResult

TASK = "put a mug in desk."


class ShiftingPool:
    """ALFWorld-shaped fake whose admissible actions change every step; records what it offered and got."""

    def __init__(self, win_action="go to desk 2", turns_to_offer=4):
        self.win_action, self.offered, self.received = win_action, {}, {}
        self.turns, self.n = turns_to_offer, {}

    def _admissible(self, k):
        return ["look", f"go to desk {k}", f"take mug {k} from shelf 1", "inventory"]

    def _result(self, i, won=False):
        k = self.n[i]
        adm = self._admissible(k)
        self.offered.setdefault(i, []).append(adm)
        return ToyStepResult(obs=f"Episode {i} is at step {k}.", reward=1.0 if won else 0.0, done=won,
                             info={"admissible_actions": adm, "won": won, "task_type": "pick", "task": TASK})

    def reset(self, task_ids):
        self.n = {i: 0 for i in range(len(task_ids))}
        return [self._result(i) for i in range(len(task_ids))]

    def step(self, ids, actions):
        out = []
        for i, a in zip(ids, actions):
            self.received.setdefault(i, []).append(a)
            self.n[i] += 1
            out.append(self._result(i, won=a == self.win_action))
        return out


@pytest.fixture()
def chat(tiny_tokenizer):
    return ChatTokenizer(tiny_tokenizer)


def _reference_scores(model, context, candidates):
    """Sum of log-probs of each candidate from one plain full forward of [context | candidate] per candidate."""
    scores = []
    for cand in candidates:
        with torch.no_grad():
            logits = model(torch.tensor([context + cand])).logits[0, len(context) - 1:-1].log_softmax(-1)
        scores.append(float(logits.gather(-1, torch.tensor(cand)[:, None]).sum()))
    return scores


def test_action_response_is_the_warm_start_format():
    from skillduet_plugin.warmstart.episodes import expert_response

    assert action_response("go to desk 1") == "<think>I should look there.</think><action>go to desk 1</action>"
    assert action_response("look") == "<think>This is the next step.</think><action>look</action>"
    assert all(expert_response(a) == action_response(a) for a in ("take mug 1 from desk 1", "heat egg 1", "x"))
    # a click names what it clicks, after a space (the instruction's own token for a colour or size)
    assert action_response("click[navy blue]") == ("<think>I choose navy blue.</think>"
                                                   "<action>click[navy blue]</action>")
    # the bare verb (the tiny tokenizer's corpus line) keeps its reason, so the default build is unchanged
    assert action_response("click") == "<think>This matches the goal.</think><action>click</action>"


def test_candidate_logprobs_equal_full_forwards(chat, tiny_model):
    context = chat.prompt_ids([{"role": "user", "content": "Your task is to: " + TASK}])
    candidates = [chat.encode(action_response(a)) + [chat.eos_token_id]
                  for a in ("look", "go to desk 1", "take mug 1 from shelf 1", "inventory")]
    candidates.append([chat.eos_token_id])  # a one-token candidate: scored from the context alone
    assert len({len(c) for c in candidates}) > 2  # different lengths exercise the right padding
    ref = _reference_scores(tiny_model, context, candidates)
    with torch.no_grad():
        for batch in (1, 2, 64):  # chunking over the repeated KV cache changes nothing
            got = candidate_logprobs(tiny_model, context, candidates, candidate_batch=batch)
            torch.testing.assert_close(torch.tensor(got), torch.tensor(ref), atol=1e-4, rtol=1e-4)


def test_greedy_choice_is_the_argmax_of_independent_scores(chat, tiny_model):
    choose = hf_choice_fn(tiny_model, chat, do_sample=False)
    contexts = [chat.prompt_ids([{"role": "user", "content": text}]) for text in ("look around", TASK, "open it")]
    cand_lists = [[chat.encode(action_response(a)) + [chat.eos_token_id] for a in actions] for actions in
                  (["look", "inventory"], ["go to desk 1", "go to shelf 1", "take mug 1 from shelf 1"],
                   ["open drawer 1", "close drawer 1", "examine drawer 1", "look"])]
    chosen = choose(contexts, cand_lists)
    for ctx, cands, gen in zip(contexts, cand_lists, chosen):
        scores = _reference_scores(tiny_model, ctx, cands)
        assert gen.token_ids == cands[max(range(len(cands)), key=lambda k: scores[k])]
        assert gen.logps is None


def test_sampled_choice_follows_the_softmax_of_the_scores(chat, tiny_model):
    context = chat.prompt_ids([{"role": "user", "content": TASK}])
    cands = [chat.encode(action_response(a)) + [chat.eos_token_id] for a in ("look", "go to desk 1", "inventory")]
    scores = torch.tensor(_reference_scores(tiny_model, context, cands))
    temperature = 2.0
    expected = (scores / temperature).softmax(-1)
    choose = hf_choice_fn(tiny_model, chat, temperature=temperature)
    torch.manual_seed(0)
    picks = [cands.index(g.token_ids) for g in choose([context] * 600, [cands] * 600)]
    freq = torch.tensor([picks.count(k) / len(picks) for k in range(len(cands))])
    assert (freq - expected).abs().max() < 0.06
    torch.manual_seed(0)
    again = [cands.index(g.token_ids) for g in choose([context] * 600, [cands] * 600)]
    assert again == picks  # seeded


def test_choose_mode_plays_only_admissible_actions_and_records_their_tokens(chat, tiny_model):
    pool = ShiftingPool()
    torch.manual_seed(3)
    eps = run_episodes(["g0", "g0", "g1"], env_name="alfworld", pool=pool, chat=chat, max_turns=4,
                       max_new_tokens=64, max_total_tokens=4096, action_selection="choose",
                       choose_fn=hf_choice_fn(tiny_model, chat, temperature=1.0))
    for i, ep in enumerate(eps):
        assert ep.num_turns == len(pool.received[i]) >= 1
        assert all(ep.valid) and ep.invalid_actions == 0
        for turn, action in enumerate(ep.actions):
            assert action in pool.offered[i][turn]  # the list shown before that turn
        assert ep.actions == pool.received[i]
        # completion = chosen response + eos (mask: its decisive tokens) | env turn (mask 0) | ...
        ids, mask, k = ep.tokens.completion_ids, ep.tokens.completion_mask, 0
        user_turns = [m["content"] for m in ep.messages[len(ep.student_messages):] if m["role"] == "user"]
        for turn, action in enumerate(ep.actions):
            policy = chat.encode(action_response(action)) + [chat.eos_token_id]
            offered = [chat.encode(action_response(a)) + [chat.eos_token_id] for a in pool.offered[i][turn]]
            assert ids[k:k + len(policy)] == policy
            assert mask[k:k + len(policy)] == decisive_mask(policy, offered)
            assert 0 < sum(mask[k:k + len(policy)]) < len(policy)  # some tokens decide, the shared ones do not
            assert ep.responses[turn] == action_response(action)
            k += len(policy)
            if turn < len(user_turns):
                env = chat.turn_ids(user_turns[turn])
                assert ids[k:k + len(env)] == env and mask[k:k + len(env)] == [0] * len(env)
                k += len(env)
        assert k == len(ids)


def test_decisive_mask_marks_the_tokens_where_candidates_part():
    go1, go2 = [5, 6, 7, 1, 0], [5, 6, 7, 2, 0]   # "think go to | desk 1 / desk 2 | eos"
    take, look = [5, 8, 9, 3, 0], [4, 0]
    cands = [go1, go2, take, look]
    assert decisive_mask(go1, cands) == [1, 1, 0, 1, 0]   # 5 vs look's 4; 6 vs take's 8; 7 forced; 1 vs 2
    assert decisive_mask(take, cands) == [1, 1, 0, 0, 0]
    assert decisive_mask(look, cands) == [1, 0]
    assert decisive_mask(go1, [go1]) == [0] * 5           # a forced turn decides nothing
    # a candidate that is a prefix of another until its end: the eos is where they part
    assert decisive_mask([5, 6, 0], [[5, 6, 0], [5, 6, 4, 0]]) == [0, 0, 1]
    # negative control: the full mask (what training on every chosen token would use) is not what comes out
    assert decisive_mask(go1, cands) != [1] * len(go1)


def test_choose_mode_equals_generating_the_chosen_text(chat, tiny_model):
    """The same choices replayed through generate mode give identical episodes (tokens, masks, messages)."""
    torch.manual_seed(5)
    chosen_eps = run_episodes(["g0", "g1"], env_name="alfworld", pool=ShiftingPool(), chat=chat, max_turns=3,
                              max_new_tokens=64, max_total_tokens=4096, action_selection="choose",
                              choose_fn=hf_choice_fn(tiny_model, chat))
    scripts = {tuple(ep.tokens.prompt_ids): [chat.encode(r) + [chat.eos_token_id] for r in ep.responses]
               for ep in chosen_eps}
    cursor = {k: 0 for k in scripts}

    def replay(contexts, max_new_tokens):
        out = []
        for ctx in contexts:
            key = next(k for k in scripts if tuple(ctx[:len(k)]) == k)
            out.append(Generation(token_ids=scripts[key][cursor[key]]))
            cursor[key] += 1
        return out

    generated = run_episodes(["g0", "g1"], env_name="alfworld", pool=ShiftingPool(), generate_fn=replay,
                             chat=chat, max_turns=3, max_new_tokens=64, max_total_tokens=4096,
                             action_selection="generate")
    for a, b in zip(chosen_eps, generated):
        assert a.tokens.completion_ids == b.tokens.completion_ids
        # the same tokens; choose mode masks the ones every remaining candidate shares (decisive_mask)
        assert all(m <= n for m, n in zip(a.tokens.completion_mask, b.tokens.completion_mask))
        assert sum(a.tokens.completion_mask) < sum(b.tokens.completion_mask)
        assert a.messages == b.messages and a.actions == b.actions and a.valid == b.valid


def test_candidates_over_the_turn_cap_are_left_out(chat):
    seen = []

    def first(contexts, candidates):
        seen.append([len(c) for c in candidates[0]])
        return [Generation(token_ids=c[0]) for c in candidates]

    lengths = {a: len(chat.encode(action_response(a))) + 1 for a in ShiftingPool()._admissible(0)}
    cap = min(lengths.values())  # "take mug 0 from shelf 1" and "go to desk 0" do not fit
    (ep,) = run_episodes(["g0"], env_name="alfworld", pool=ShiftingPool(), chat=chat, max_turns=1,
                         max_new_tokens=cap, max_total_tokens=4096, action_selection="choose", choose_fn=first)
    assert all(n <= cap for n in seen[0]) and len(seen[0]) < len(lengths)
    assert lengths[ep.actions[0]] == cap
    (ep,) = run_episodes(["g0"], env_name="alfworld", pool=ShiftingPool(), chat=chat, max_turns=1,
                         max_new_tokens=cap - 1, max_total_tokens=4096, action_selection="choose", choose_fn=first)
    assert ep.truncated and ep.num_turns == 0 and ep.tokens.completion_ids == []


def test_action_selection_is_validated(chat, tiny_model):
    kw = dict(env_name="alfworld", pool=ShiftingPool(), chat=chat, max_turns=1, max_new_tokens=64,
              max_total_tokens=4096)
    with pytest.raises(ValueError, match="action_selection='sample' is invalid"):
        run_episodes(["g0"], action_selection="sample", **kw)
    with pytest.raises(ValueError, match="needs choose_fn"):
        run_episodes(["g0"], action_selection="choose", **kw)
    with pytest.raises(ValueError, match="needs generate_fn"):
        run_episodes(["g0"], action_selection="generate", **kw)
    with pytest.raises(ValueError, match="temperature"):
        hf_choice_fn(tiny_model, chat, temperature=0.0)

    class NoAdmissible(ShiftingPool):
        def _admissible(self, k):
            return []

    with pytest.raises(ValueError, match="needs the environment's admissible actions"):
        run_episodes(["g0"], **{**kw, "pool": NoAdmissible()}, action_selection="choose",
                     choose_fn=hf_choice_fn(tiny_model, chat))
