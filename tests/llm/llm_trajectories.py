"""Hand-built ALFWorld and WebShop trajectories in the environments' real text, shared by the llm tests."""

from __future__ import annotations

ALF_INIT = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see "
    "a cabinet 6, a cabinet 5, a cabinet 4, a cabinet 3, a cabinet 2, a cabinet 1, a coffeemachine 1, "
    "a countertop 3, a countertop 2, a countertop 1, a drawer 3, a drawer 2, a drawer 1, a fridge 1, "
    "a garbagecan 1, a microwave 1, a shelf 3, a shelf 2, a shelf 1, a sinkbasin 1, a stoveburner 4, "
    "a stoveburner 3, a stoveburner 2, a stoveburner 1, and a toaster 1.\n\n"
    "Your task is to: put a clean knife in drawer.")
CLEAN_TASK = "put a clean knife in drawer."


def traj(traj_id, task, steps, won, reward=None, initial=None):
    """A trajectory payload from ``[(action, observation), ...]``."""
    observations = [o for _, o in steps]
    if initial is not None:
        observations = [initial] + observations
    return {"traj_id": traj_id, "task": task, "actions": [a for a, _ in steps], "observations": observations,
            "won": won, "reward": float(won) if reward is None else reward}


CLEAN_SUCCESS_STEPS = [
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a bread 1, and a mug 2."),
    ("look", "You are facing the countertop 1. Next to it, you see nothing."),
    ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a knife 1, a lettuce 1, "
                           "and a spatula 2."),
    ("take knife 1 from countertop 2", "You pick up the knife 1 from the countertop 2."),
    ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."),
    ("clean knife 1 with sinkbasin 1", "You clean the knife 1 using the sinkbasin 1."),
    ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
    ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see a fork 1."),
    ("move knife 1 to drawer 1", "You move the knife 1 to the drawer 1."),
]

CLEAN_FAILURE_STEPS = [
    ("go to countertop 2", "You arrive at countertop 2. On the countertop 2, you see a knife 1, a lettuce 1, "
                           "and a spatula 2."),
    ("take knife 1 from countertop 2", "You pick up the knife 1 from the countertop 2."),
    ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed."),
    ("move knife 1 to drawer 1", "Nothing happens."),
    ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see a fork 1."),
    ("move knife 1 to drawer 1", "You move the knife 1 to the drawer 1."),
    ("look", "You are facing the drawer 1. Next to it, you see nothing."),
    ("look", "You are facing the drawer 1. Next to it, you see nothing."),
    ("look", "You are facing the drawer 1. Next to it, you see nothing."),
    ("look", "You are facing the drawer 1. Next to it, you see nothing."),
]


def clean_success():
    return traj("s0", CLEAN_TASK, CLEAN_SUCCESS_STEPS, True, initial=ALF_INIT)


def clean_failure():
    return traj("f0", CLEAN_TASK, CLEAN_FAILURE_STEPS, False, initial=ALF_INIT)


WEB_TASK = "i need a long sleeve cotton shirt in navy, size large, and price lower than 40.00 dollars"
WEB_START = f"WebShop [SEP] Instruction: [SEP] {WEB_TASK} [SEP] Search"
WEB_RESULTS = (f"Instruction: [SEP] {WEB_TASK} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > "
               "[SEP] B09QQP3356 [SEP] Men's Cotton Long Sleeve Henley Shirt [SEP] $24.99 [SEP] B07XDRVVYM [SEP] "
               "Women's Linen Blouse [SEP] $55.00")
WEB_ITEM = (f"Instruction: [SEP] {WEB_TASK} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] black [SEP] navy "
            "[SEP] white [SEP] size [SEP] small [SEP] medium [SEP] large [SEP] Men's Cotton Long Sleeve Henley "
            "Shirt [SEP] Price: $24.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] "
            "Buy Now")
WEB_DONE = "Thank you for shopping with us! [SEP] Your code: [SEP] None [SEP] Your score (min 0.0, max 1.0) [SEP] {}"


def web_success():
    steps = [("search[long sleeve cotton shirt navy]", WEB_RESULTS), ("click[b09qqp3356]", WEB_ITEM),
             ("click[navy]", WEB_ITEM), ("click[large]", WEB_ITEM), ("click[buy now]", WEB_DONE.format("1.0"))]
    return traj("ws", WEB_TASK, steps, True, 1.0, initial=WEB_START)


def web_failure():
    steps = [("search[shirt]", WEB_RESULTS), ("click[b09qqp3356]", WEB_ITEM),
             ("click[buy now]", WEB_DONE.format("0.5"))]
    return traj("wf", WEB_TASK, steps, False, 0.5, initial=WEB_START)
