"""The retrieval tool's default collection: passages of invented facts about invented cities, people,
mountains and companies, drawn from a fixed seed (nothing in them is true or taken from elsewhere).

:func:`passages` makes them, each with questions its own facts answer (the tests ask them);
``python -m rlloom_agents.passages`` writes the collection as the retrieval tool reads it, one JSON
object ``{"id", "text"}`` per line, to the file shipped as package data (:data:`SHIPPED`), so that the
shipped file is exactly this module's output.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SHIPPED = Path(__file__).with_name("data") / "passages.jsonl"
SEED = 34
COUNTS = {"city": 1000, "person": 1000, "mountain": 500, "company": 500}
SYLLABLES = ("ka", "lo", "mir", "ven", "tas", "dor", "bel", "qui", "zan", "rho", "sel", "und", "vor", "thi",
             "mal", "gre", "osk", "pra", "lin", "hed", "fau", "nyr", "cor", "esh", "bri", "wal", "dun", "ix")
TRADES = ("copper", "salt", "wool", "glass", "timber", "silk", "tin", "amber", "barley", "paper")
CRAFTS = ("glassblower", "cartographer", "clockmaker", "weaver", "astronomer", "bridge builder", "potter",
          "botanist", "engraver", "shipwright")
GOODS = ("carpets", "bells", "lanterns", "rope", "compasses", "barrels", "ink", "kites", "saddles", "lenses")


@dataclass(frozen=True)
class Passage:
    """One passage: its ``id``, its ``text`` and ``questions`` its facts answer."""

    id: str
    text: str
    questions: tuple[str, ...]


class Names:
    """Invented names, never the same one twice."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.used = rng, set()

    def __call__(self) -> str:
        while True:
            name = "".join(self.rng.choice(SYLLABLES) for _ in range(self.rng.randint(2, 3))).capitalize()
            if name not in self.used:
                self.used.add(name)
                return name


def passages() -> list[Passage]:
    """The collection (see the module doc): the same passages on every call."""
    rng = random.Random(SEED)
    name = Names(rng)
    cities = [name() for _ in range(COUNTS["city"])]
    people = [f"{name()} {name()}" for _ in range(COUNTS["person"])]
    return [*city_passages(rng, name, cities, people), *person_passages(rng, cities, people),
            *mountain_passages(rng, name, people), *company_passages(rng, name, cities)]


def city_passages(rng: random.Random, name: Names, cities: list[str], people: list[str]) -> Iterator[Passage]:
    """A city per name of ``cities``, its mayor one of ``people``."""
    for i, city in enumerate(cities):
        founded, people_count, height = rng.randint(900, 1900), rng.randint(800, 900000), rng.randint(2, 2400)
        river, trade, mayor = name(), rng.choice(TRADES), rng.choice(people)
        text = (f"{city} is a city on the river {river}. It was founded in {founded} and has {people_count} "
                f"inhabitants. {city} lies {height} metres above sea level; its main trade is {trade}, and its "
                f"mayor is {mayor}.")
        yield Passage(f"city-{i:04d}", text, (f"When was the city of {city} founded?",
                                              f"How many inhabitants does {city} have?",
                                              f"What is the main trade of {city}?"))


def person_passages(rng: random.Random, cities: list[str], people: list[str]) -> Iterator[Passage]:
    """A person per name of ``people``, born in one of ``cities``."""
    for i, person in enumerate(people):
        born, city, craft = rng.randint(1700, 2000), rng.choice(cities), rng.choice(CRAFTS)
        works, pupils = rng.randint(1, 90), rng.randint(0, 40)
        text = (f"{person} was a {craft}, born in {born} in {city}. Over a long career {person.split()[0]} "
                f"finished {works} commissioned works and trained {pupils} apprentices.")
        yield Passage(f"person-{i:04d}", text, (f"What was the profession of {person}?",
                                                f"In which year was {person} born?",
                                                f"How many apprentices did {person} train?"))


def mountain_passages(rng: random.Random, name: Names, people: list[str]) -> Iterator[Passage]:
    """:data:`COUNTS` mountains, each first climbed by one of ``people``."""
    for i in range(COUNTS["mountain"]):
        mountain, height = name(), rng.randint(600, 8800)
        climbed, climber = rng.randint(1750, 1990), rng.choice(people)
        text = (f"Mount {mountain} rises {height} metres. Its summit was first reached in {climbed} by "
                f"{climber}, after {rng.randint(2, 30)} days on the glacier.")
        yield Passage(f"mountain-{i:04d}", text, (f"How high is Mount {mountain}?",
                                                  f"Who first reached the summit of Mount {mountain}?"))


def company_passages(rng: random.Random, name: Names, cities: list[str]) -> Iterator[Passage]:
    """:data:`COUNTS` companies, each set up in one of ``cities``."""
    for i in range(COUNTS["company"]):
        company, goods = f"{name()} {rng.choice(('Works', 'Guild', 'Foundry', 'Company'))}", rng.choice(GOODS)
        founded, staff, city = rng.randint(1800, 2020), rng.randint(5, 20000), rng.choice(cities)
        text = (f"The {company} makes {goods}. It was set up in {founded} in {city} and employs {staff} "
                "people.")
        yield Passage(f"company-{i:04d}", text, (f"What does the {company} make?",
                                                 f"How many people does the {company} employ?"))


def jsonl(collection: list[Passage]) -> str:
    """The collection as the retrieval tool reads it: one ``{"id", "text"}`` object per line."""
    return "".join(json.dumps({"id": p.id, "text": p.text}) + "\n" for p in collection)


if __name__ == "__main__":
    SHIPPED.parent.mkdir(exist_ok=True)
    SHIPPED.write_text(jsonl(passages()), encoding="utf-8")
