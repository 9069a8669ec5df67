"""Random ALFRED-style rooms as PDDL problems: receptacles at locations, typed objects inside them, one goal.

Names follow ALFRED's id scheme (``Apple_bar__minus_00_dot_59_bar__plus_00_dot_83_bar__minus_00_dot_40``,
``Sink_bar_..._bar_SinkBasin``, ``loc_bar_3_bar__minus_2_bar_1_bar_45``) so that ALFWorld's demangler turns them
into ``apple 1``, ``sinkbasin 1`` exactly as in the official games. Object properties (pickupable, cleanable,
heatable, coolable, toggleable) and what each receptacle can contain come from ALFWorld's own constants.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from skillduet_plugin.envs.alfworld.engine import import_engine

# Receptacle class -> (openable, largest instance count in a generated room).
RECEPTACLES: dict[str, tuple[bool, int]] = {
    "CounterTop": (False, 2), "Drawer": (True, 3), "Cabinet": (True, 3), "Fridge": (True, 1),
    "Microwave": (True, 1), "SinkBasin": (False, 1), "Desk": (False, 1), "SideTable": (False, 2),
    "Shelf": (False, 2), "GarbageCan": (False, 1), "DiningTable": (False, 1), "Dresser": (False, 1),
    "CoffeeTable": (False, 1),
}
# Objects a task may ask for, per task type (ALFWorld classes with the needed property).
TARGETS: dict[str, tuple[str, ...]] = {
    "pick": ("Book", "CD", "CellPhone", "Cloth", "CreditCard", "KeyChain", "Pen", "Pencil", "SoapBottle",
             "Spatula", "Spoon", "TissueBox", "Vase", "Watch", "Candle", "Kettle", "Plate", "Bowl"),
    "look": ("AlarmClock", "Book", "CD", "CellPhone", "CreditCard", "KeyChain", "Pen", "Pencil", "Statue",
             "Watch", "Bowl", "Mug"),
    "clean": ("Apple", "Bowl", "ButterKnife", "Cloth", "Cup", "DishSponge", "Fork", "Kettle", "Knife", "Ladle",
              "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato", "SoapBar", "Spatula", "Spoon", "Tomato"),
    "heat": ("Apple", "Bread", "Cup", "Egg", "Mug", "Plate", "Potato", "Tomato"),
    "cool": ("Apple", "Bowl", "Bread", "Cup", "Egg", "Lettuce", "Mug", "Pan", "Plate", "Pot", "Potato", "Tomato",
             "WineBottle"),
    "pick2": ("Book", "CD", "CellPhone", "Cloth", "CreditCard", "KeyChain", "Pen", "Pencil", "SoapBottle",
              "Spoon", "TissueBox", "Vase", "Watch", "Candle", "Plate"),
}
DISTRACTORS = ("AlarmClock", "Apple", "Book", "Bowl", "Bread", "CD", "CellPhone", "Cup", "DishSponge", "Fork",
               "KeyChain", "Knife", "Mug", "Newspaper", "Pen", "Pencil", "Plate", "Potato", "SaltShaker",
               "SoapBottle", "Spoon", "Statue", "Tomato", "Vase", "Watch")
LAMP = "DeskLamp"
LAMP_HOLDERS = ("Desk", "SideTable", "Dresser")
# Receptacles where a task's appliance already lives and which therefore is not the goal receptacle.
APPLIANCE = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}


def _constants():

    import_engine()  # imports alfworld without leaking its ALFWORLD_DATA side effect
    from alfworld.gen import constants  # lazy: alfworld

    return constants


def can_contain(recep_cls: str, obj_cls: str) -> bool:
    return obj_cls in _constants().VAL_RECEPTACLE_OBJECTS.get(recep_cls, ())


def object_properties(obj_cls: str) -> list[str]:
    """The type facts ALFWorld's domain needs for an object class."""
    actions = _constants().VAL_ACTION_OBJECTS
    props = ["toggleable"] if obj_cls in actions["Toggleable"] else ["pickupable"]
    for prop, key in (("cleanable", "Cleanable"), ("heatable", "Heatable"), ("coolable", "Coolable")):
        if obj_cls in actions[key]:
            props.append(prop)
    return props


def _coord(rng: random.Random) -> str:
    value = rng.uniform(-3.0, 3.0)
    return ("_plus_" if value >= 0 else "_minus_") + f"{abs(value):05.2f}".replace(".", "_dot_")


def _int(value: int) -> str:
    return str(value) if value >= 0 else f"_minus_{-value}"


@dataclass
class Room:
    """A generated scene: receptacles (id -> class), objects (id -> class), placements and locations."""

    rng: random.Random
    receptacles: dict[str, str] = field(default_factory=dict)
    objects: dict[str, str] = field(default_factory=dict)
    inside: dict[str, str] = field(default_factory=dict)  # object id -> receptacle id
    location: dict[str, str] = field(default_factory=dict)  # receptacle id -> location
    agent_location: str = ""
    _used: set[str] = field(default_factory=set)

    def _unique(self, make) -> str:
        while True:
            name = make()
            if name not in self._used:
                self._used.add(name)
                return name

    def _new_location(self) -> str:
        r = self.rng
        return self._unique(lambda: f"loc_bar_{_int(r.randint(-12, 12))}_bar_{_int(r.randint(-12, 12))}"
                                    f"_bar_{r.randint(0, 3)}_bar_{r.choice((0, 15, 30, 45, 60))}")

    def add_receptacle(self, cls: str) -> str:
        r = self.rng
        if cls == "SinkBasin":
            rid = self._unique(lambda: f"Sink_bar_{_coord(r)}_bar_{_coord(r)}_bar_{_coord(r)}_bar_SinkBasin")
        else:
            rid = self._unique(lambda: f"{cls}_bar_{_coord(r)}_bar_{_coord(r)}_bar_{_coord(r)}")
        self.receptacles[rid] = cls
        self.location[rid] = self._new_location()
        return rid

    def add_object(self, cls: str, receptacle_id: str) -> str:
        r = self.rng
        oid = self._unique(lambda: f"{cls}_bar_{_coord(r)}_bar_{_coord(r)}_bar_{_coord(r)}")
        self.objects[oid] = cls
        self.inside[oid] = receptacle_id
        return oid

    def of_class(self, cls: str) -> list[str]:
        return sorted(rid for rid, c in self.receptacles.items() if c == cls)

    def holders(self, obj_cls: str, exclude: tuple[str, ...] = ()) -> list[str]:
        return sorted(rid for rid, c in self.receptacles.items() if can_contain(c, obj_cls) and c not in exclude)

    def problem(self, name: str, goal: str) -> str:
        """The PDDL problem text of this room with ``goal`` (ALFWorld's goal block, define closed by it)."""
        self.agent_location = self.agent_location or self._new_location()
        otypes = sorted(set(self.objects.values()))
        rtypes = sorted(set(self.receptacles.values()))
        decl = ["agent1 - agent"] + [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
        decl += [f"{o} - object" for o in sorted(self.objects)]
        decl += [f"{r} - receptacle" for r in sorted(self.receptacles)]
        decl += [f"{loc} - location" for loc in sorted({self.agent_location, *self.location.values()})]
        init = [f"(atLocation agent1 {self.agent_location})"]
        for rid, cls in sorted(self.receptacles.items()):
            init.append(f"(receptacleType {rid} {cls}Type)")
            init.append(f"(receptacleAtLocation {rid} {self.location[rid]})")
            if RECEPTACLES[cls][0]:
                init.append(f"(openable {rid})")
        for oid, cls in sorted(self.objects.items()):
            init.append(f"(objectType {oid} {cls}Type)")
            init += [f"({prop} {oid})" for prop in object_properties(cls)]
            init.append(f"(inReceptacle {oid} {self.inside[oid]})")
            init.append(f"(objectAtLocation {oid} {self.location[self.inside[oid]]})")
        init += [f"(canContain {r}Type {o}Type)" for r in rtypes for o in otypes if can_contain(r, o)]
        lines = [f"(define (problem {name})", "(:domain alfred)", "(:objects"]
        lines += [f"        {d}" for d in decl] + ["    )", "(:init"] + [f"        {f}" for f in init] + ["    )"]
        return "\n".join(lines) + "\n" + goal
