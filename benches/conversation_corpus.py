"""Long conversations between two people who know each other, one session per day's log.

Each conversation is a folder ``conv-NN/memory/`` of daily logs: a date
heading, a session heading with the time, then one line per turn naming the
speaker (``- Maya: …`` in half of the conversations, ``**Maya:** …`` in the
other half). Each person has seven threads of their life (a pottery class,
a child's milestones, a career, a pet, a trip, …; the two share some), told
an episode per session over weeks, 2-3 episodes a session, with the other's
reaction, a detail asked and given, and everyday talk between them (work,
sleep, the weather, feelings, plans) in every session: 14-32 turns.

Questions, each answered by one to three turns (its *evidence*: file and
line), asked about one conversation (a search filtered by its folder):

* ``single-hop`` — a detail of one episode ("what role did Ava get in the
  school play");
* ``temporal`` — when an episode happened (the answer is the session's date);
* ``multi-hop`` — a thread across sessions ("what has Maya made in pottery
  class so far": any of its episodes is a hit);
* ``open-domain`` — an inference about a person from a thread, in words its
  turns do not use ("would Maya enjoy a day at a ceramics museum").

A hit is a result of that conversation whose line range holds an evidence
line. ``python -m benches.retrieval --set conversation`` indexes the folders
into one collection and asks each question with ``source_prefix`` set to
its conversation, as a shared store is searched.
"""

from __future__ import annotations

# ruff: noqa: E501 - the lines of the conversations read better whole
import random
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import Any

NAMES = (
    "Maya|Theo|Priya|Jonas|Amara|Lucas|Sofia|Kenji|Ines|Omar|Hannah|Diego|Leila|Felix|Nora|Tariq|Clara|Mateo|"
    "Yuki|Ben|Zara|Emil|Rosa|Arjun|Lena|Samir|Greta|Malik|Elif|Hugo"
).split("|")
SLOTS: dict[str, list[str]] = {
    "kid": "Ava|Milo|Zoe|Leo|Iris|Noah|Ruby|Finn|Lila|Oscar".split("|"),
    "partner": "Sam|Alex|Jordan|Robin|Chris|Dana|Kim|Jamie".split("|"),
    "pet": "Biscuit|Pepper|Luna|Mochi|Ziggy|Olive|Bean|Pixel|Juniper|Waffles".split("|"),
    "kind": "dog|cat|rabbit|puppy|kitten".split("|"),
    "workplace": "the hospital|the design studio|the bank|the school|the start-up|the council|the museum".split("|"),
    "project": "patient records|new website|warehouse robots|solar roof|river clean-up|payroll overhaul".split("|"),
    "city": "Lisbon|Kyoto|Montreal|Edinburgh|Oaxaca|Seoul|Vienna|Cape Town|Reykjavik|Hanoi|Prague".split("|"),
    "city2": "Bruges|Porto|Ljubljana|Tallinn|Bologna|Krakow|Granada|Galway".split("|"),
    "festival": "jazz|lantern|film|street food|flower|light".split("|"),
    "dish": "ramen|grilled octopus|tamales|dumplings|custard tarts|pho".split("|"),
    "colour": "deep blue|sage green|mustard yellow|speckled white|rust orange".split("|"),
    "toy": "toy dinosaur|purple bicycle bell|telescope|book about sharks".split("|"),
    "animal": "frog|lion|penguin|owl|crocodile".split("|"),
    "theme": "dinosaur|pirate|space|jungle|mermaid".split("|"),
    "flower": "sunflower|marigold|sweet pea|dahlia".split("|"),
    "language": "Spanish|Italian|Japanese|Portuguese|German|Korean".split("|"),
    "instrument": "cello|guitar|piano|saxophone|violin".split("|"),
    "band": "The Midnight Owls|Paper Lanterns|Velvet Static|The Blue Hours|Northern Drift".split("|"),
}
#: Threads each person has (of :data:`THREADS`).
PER_PERSON = 7
#: Questions asked of each conversation, by kind (drawn from all it allows).
ASKED = {"single-hop": 16, "temporal": 7, "multi-hop": 6, "open-domain": 3}


@dataclass(frozen=True)
class Question:
    kind: str
    question: str
    prefix: str  # the conversation's folder, relative to the corpus root
    evidence: tuple[tuple[str, int], ...]  # (file relative to the corpus root, 1-based line)

    @property
    def key(self) -> str:  # what benches.retrieval prints for a miss
        return self.question


#: Threads of a person's life, told an episode per session in this order. Lines start
#: with the speaker ("A": the thread's person, "B": the other); a line's questions
#: follow it as (kind, question). The first line of each episode is the thread's
#: evidence for its ``multi-hop`` and ``open-domain`` questions.
THREADS: dict[str, dict[str, Any]] = {
    "pottery": {
        "mentions": [
            "Pottery was quiet this week, we only practised pulling handles for mugs.",
            "I keep finding dried clay in my hair after class, it's a whole lifestyle.",
            "The teacher showed us a glaze that turns green in the kiln, I want to try it.",
        ],
        "multi": "What has {a} made in pottery class so far?",
        "infer": "Would {a} enjoy a day at a ceramics museum?",
        "episodes": [
            [
                (
                    "A",
                    "I finally signed up for that pottery class on Thursday evenings, my hands are covered in clay and I love it.",
                    [("temporal", "When did {a} start going to a pottery class?")],
                ),
                ("B", "That sounds so calming, is it hard to get the wheel to behave?"),
                (
                    "A",
                    "Very! My first attempt collapsed twice, but the teacher says everyone's does.",
                    [("single-hop", "How did {a}'s first tries at the wheel go?")],
                ),
            ],
            [
                (
                    "A",
                    "I made my first real bowl at pottery, it's a bit wonky but I glazed it {colour} and I use it for cereal every morning.",
                    [("single-hop", "What colour did {a} glaze the first bowl?")],
                ),
                ("B", "Wonky is charming, I want to see a picture!"),
            ],
            [
                (
                    "A",
                    "The kiln cracked the vase I'd spent three weeks on for {partner}'s birthday, I actually cried a little.",
                    [("single-hop", "What happened to the vase {a} made for {partner}?")],
                ),
                ("B", "Oh no, all that work. Will you try again?"),
                (
                    "A",
                    "Yes, I'm starting over this week, slower this time.",
                    [("single-hop", "Is {a} going to make the broken piece again?")],
                ),
            ],
            [
                (
                    "A",
                    "Guess what, I sold {n} mugs at the craft fair on Saturday, strangers paid money for something I made!",
                    [
                        ("single-hop", "How many mugs did {a} sell at the craft fair?"),
                        ("temporal", "When did {a} sell mugs at the craft fair?"),
                    ],
                ),
                ("B", "That's incredible, you're officially a professional now."),
            ],
        ],
    },
    "kid": {
        "mentions": [
            "{kid} has been asking a million questions about space at bedtime.",
            "{kid} refused to wear anything but the rain boots all week.",
            "School pickup was chaos today, {kid} forgot a lunchbox again.",
        ],
        "multi": "What milestones has {a}'s child {kid} reached recently?",
        "infer": "Is {a} a parent?",
        "episodes": [
            [
                (
                    "A",
                    "{kid} lost the first tooth today and insisted on writing the tooth fairy a letter asking for a {toy}.",
                    [
                        ("single-hop", "What did {kid} ask the tooth fairy for?"),
                        ("temporal", "When did {kid} lose a first tooth?"),
                    ],
                ),
                ("B", "Haha, that's adorable, did the tooth fairy deliver?"),
                (
                    "A",
                    "Two coins and a tiny note, {kid} has read it a hundred times.",
                    [("single-hop", "What did {kid} get under the pillow?")],
                ),
            ],
            [
                (
                    "A",
                    "{kid} got the lead role in the school play, a singing {animal}, and practises the song at breakfast every day.",
                    [("single-hop", "What role did {kid} get in the school play?")],
                ),
                ("B", "A star is born! When's the performance?"),
                ("A", "In three weeks, I've already bought tissues."),
            ],
            [
                (
                    "A",
                    "We threw {kid} a {theme} birthday party, twelve kids in the garden and a cake shaped like a volcano.",
                    [
                        ("single-hop", "What was the theme of {kid}'s birthday party?"),
                        ("temporal", "When was {kid}'s birthday party?"),
                    ],
                ),
                ("B", "Twelve kids! You're braver than me."),
            ],
            [
                (
                    "A",
                    "{kid} swam a whole length of the pool without armbands, the instructor gave a little medal and everything.",
                    [("temporal", "When did {kid} swim a length without armbands?")],
                ),
                ("B", "Tell {kid} I'm proud, that's a big deal."),
            ],
        ],
    },
    "work": {
        "mentions": [
            "Another late evening at {workplace}, the {project} thing keeps growing.",
            "Meetings all day at {workplace}, I barely touched my real work.",
            "My team brought cake for no reason today, it was sweet.",
        ],
        "multi": "How has {a}'s career at {workplace} developed?",
        "infer": "Does {a} take on responsibility at work?",
        "episodes": [
            [
                (
                    "A",
                    "My manager at {workplace} put me in charge of the {project} project, it's the biggest thing I've ever led.",
                    [
                        ("single-hop", "Which project is {a} leading at {workplace}?"),
                        ("temporal", "When was {a} put in charge of a project?"),
                    ],
                ),
                ("B", "That's a vote of confidence, how do you feel about it?"),
                ("A", "Excited and a bit sick, honestly."),
            ],
            [
                (
                    "A",
                    "I had a real argument with a colleague about the deadline, he wanted to cut testing and I refused.",
                    [("single-hop", "What did {a} and a colleague argue about?")],
                ),
                ("B", "Good for you for holding the line."),
            ],
            [
                (
                    "A",
                    "I presented the {project} work at a conference in {city}, {n} people in the room and nobody fell asleep.",
                    [
                        ("single-hop", "Where did {a} present at a conference?"),
                        ("temporal", "When did {a} speak at a conference?"),
                    ],
                ),
                ("B", "You must have been so nervous, how did the questions go?"),
                (
                    "A",
                    "One tough one, but I handled it.",
                    [("single-hop", "How did the questions go after {a}'s talk?")],
                ),
            ],
            [
                (
                    "A",
                    "They promoted me to team lead, the first thing I did was move the weekly meeting off Monday mornings.",
                    [
                        ("temporal", "When was {a} promoted to team lead?"),
                        ("single-hop", "What was the first thing {a} changed as team lead?"),
                    ],
                ),
                ("B", "Already a hero to your team, congratulations!"),
            ],
        ],
    },
    "running": {
        "mentions": [
            "I went out for a slow jog this morning, just to clear my head.",
            "My running shoes are falling apart, I need new ones.",
            "The park was full of runners this morning, everyone is training for something.",
        ],
        "multi": "How has {a}'s running gone over the months?",
        "infer": "Does {a} try to stay physically fit?",
        "episodes": [
            [
                (
                    "A",
                    "I started running with a couch-to-5k app, three mornings a week before work, my legs hate me.",
                    [("temporal", "When did {a} start running?")],
                ),
                ("B", "The first two weeks are the worst, keep going."),
            ],
            [
                (
                    "A",
                    "I twisted my ankle on a tree root in the park and the physio says no running for {n} weeks.",
                    [("single-hop", "How did {a} hurt an ankle?"), ("temporal", "When did {a} twist an ankle?")],
                ),
                ("B", "Ugh, rest it properly this time, no heroics."),
                ("A", "I'm doing the boring exercises with a resistance band every night."),
            ],
            [
                (
                    "A",
                    "I ran my first 10k race by the river and finished in {minutes} minutes, I didn't stop once.",
                    [
                        ("single-hop", "What was {a}'s time in the first 10k race?"),
                        ("temporal", "When did {a} run a 10k race?"),
                    ],
                ),
                ("B", "That's amazing, all that training paid off!"),
            ],
        ],
    },
    "garden": {
        "mentions": [
            "The garden needs so much watering in this heat.",
            "I spent the whole afternoon weeding, it's weirdly relaxing.",
            "Something keeps digging holes in the vegetable beds at night.",
        ],
        "multi": "What has {a} grown or built in the garden?",
        "infer": "Does {a} enjoy spending time outdoors with plants?",
        "episodes": [
            [
                (
                    "A",
                    "We dug up the lawn behind the house to make vegetable beds, my back is ruined but it looks great.",
                    [("temporal", "When did {a} dig up the lawn for vegetable beds?")],
                ),
                ("B", "What are you going to plant first?"),
                ("A", "Tomatoes, courgettes and far too many {flower}s."),
            ],
            [
                (
                    "A",
                    "Slugs ate every single lettuce overnight, so I've put copper tape around the beds.",
                    [("single-hop", "What did {a} do about the slugs?")],
                ),
                ("B", "The battle of the slugs, a classic."),
            ],
            [
                (
                    "A",
                    "{partner} and I built a little greenhouse out of old windows we found at a salvage yard.",
                    [
                        ("single-hop", "What did {a} build the greenhouse from?"),
                        ("temporal", "When did {a} build a greenhouse?"),
                    ],
                ),
                ("B", "That's so resourceful, send me a photo!"),
            ],
        ],
    },
    "trip": {
        "mentions": [
            "I've been looking at flights again, I can't help myself.",
            "I still have sand in my suitcase from the last trip.",
            "I made a list of places I want to see before I'm forty.",
        ],
        "multi": "Which places has {a} travelled to?",
        "infer": "Does {a} like travelling abroad?",
        "episodes": [
            [
                (
                    "A",
                    "We booked a week in {city} for next month, mostly for the food and the {festival} festival.",
                    [
                        ("single-hop", "Where is {a} going on holiday next month?"),
                        ("temporal", "When did {a} book the trip to {city}?"),
                    ],
                ),
                ("B", "I'm so jealous, I've always wanted to go there."),
            ],
            [
                (
                    "A",
                    "We're back from {city}, we got lost every day and ate the best {dish} of my life.",
                    [("single-hop", "What was the best food {a} ate in {city}?")],
                ),
                ("B", "Welcome home! Did you bring me anything?"),
                (
                    "A",
                    "A tiny fridge magnet, as promised.",
                    [("single-hop", "What souvenir did {a} bring {b} from {city}?")],
                ),
            ],
            [
                (
                    "A",
                    "I went to {city2} for a weekend on my own, just walking and museums, it was exactly what I needed.",
                    [("temporal", "When did {a} travel alone to {city2}?")],
                ),
                ("B", "Solo trips are the best, you come back a new person."),
            ],
        ],
    },
    "pet": {
        "mentions": [
            "{pet} has decided the laundry basket is her bed now.",
            "{pet} woke me up at five demanding breakfast again.",
            "I bought {pet} a new toy and she prefers the box it came in.",
        ],
        "multi": "What has happened with {a}'s {kind} {pet}?",
        "infer": "Does {a} have an animal at home?",
        "episodes": [
            [
                (
                    "A",
                    "We adopted a {kind} from the shelter and named her {pet}, she's already sleeping on my pillow.",
                    [("single-hop", "What is the name of {a}'s {kind}?"), ("temporal", "When did {a} adopt a {kind}?")],
                ),
                ("B", "Oh my goodness, I need pictures immediately."),
            ],
            [
                (
                    "A",
                    "{pet} swallowed a hair tie and we spent the night at the emergency vet, she's fine but the bill wasn't.",
                    [
                        ("single-hop", "Why did {pet} go to the emergency vet?"),
                        ("temporal", "When did {pet} go to the emergency vet?"),
                    ],
                ),
                ("B", "Poor thing, and poor you."),
            ],
            [
                (
                    "A",
                    "{pet} graduated from obedience class, she can sit and wait but still steals socks.",
                    [("single-hop", "What class did {pet} complete?")],
                ),
                ("B", "A graduate! Does she get a tiny hat?"),
            ],
        ],
    },
    "volunteer": {
        "mentions": [
            "It was a busy morning at the food bank, so many donations.",
            "The retired couple at the food bank brought homemade jam for everyone.",
            "We're short of volunteers again this month.",
        ],
        "multi": "How does {a} help out in the community?",
        "infer": "Would {a} be described as someone who gives back to others?",
        "episodes": [
            [
                (
                    "A",
                    "I started volunteering at the food bank on Sunday mornings, sorting donations with a lovely retired couple.",
                    [
                        ("single-hop", "Where does {a} volunteer on Sundays?"),
                        ("temporal", "When did {a} start volunteering?"),
                    ],
                ),
                ("B", "That's lovely, how did you get into it?"),
                ("A", "A friend needed help one weekend and I just kept going back."),
            ],
            [
                (
                    "A",
                    "We organised a charity bake sale for the food bank and raised {n} pounds in one afternoon.",
                    [
                        ("single-hop", "How much money did the bake sale raise?"),
                        ("temporal", "When did {a} organise a bake sale?"),
                    ],
                ),
                ("B", "That's a lot of brownies!"),
            ],
        ],
    },
    "language": {
        "mentions": [
            "I've been watching films in {language} with subtitles to practise.",
            "My {language} homework took two hours last night.",
            "I tried ordering coffee in {language} and the waiter answered in English.",
        ],
        "multi": "How is {a} getting on with learning {language}?",
        "infer": "Is {a} interested in other cultures?",
        "episodes": [
            [
                (
                    "A",
                    "I signed up for an evening {language} class, twice a week after work, the grammar is brutal.",
                    [
                        ("single-hop", "Which language is {a} studying?"),
                        ("temporal", "When did {a} start a language class?"),
                    ],
                ),
                ("B", "You'll be fluent in no time, I believe in you."),
            ],
            [
                (
                    "A",
                    "I passed the first {language} exam with {pct} percent, I'm allowed into the intermediate group now.",
                    [
                        ("single-hop", "What score did {a} get on the language exam?"),
                        ("temporal", "When did {a} pass a language exam?"),
                    ],
                ),
                ("B", "Intermediate! You'll have to teach me some words."),
            ],
        ],
    },
    "music": {
        "mentions": [
            "I practised scales for an hour and the neighbours didn't complain.",
            "I've had the same song stuck in my head for three days.",
            "My fingers hurt from practising so much.",
        ],
        "multi": "What has {a} done with music lately?",
        "infer": "Would {a} enjoy going to live concerts?",
        "episodes": [
            [
                (
                    "A",
                    "I dug out my old {instrument} and started lessons again with a teacher down the road.",
                    [
                        ("single-hop", "Which instrument did {a} start playing again?"),
                        ("temporal", "When did {a} restart music lessons?"),
                    ],
                ),
                ("B", "I didn't know you played! Will you play for me sometime?"),
            ],
            [
                (
                    "A",
                    "We saw {band} live last night, front row, I still can't hear properly.",
                    [("single-hop", "Which band did {a} see live?"), ("temporal", "When did {a} go to a concert?")],
                ),
                ("B", "Front row! Were they as good as the records?"),
                (
                    "A",
                    "Better, they played for almost three hours.",
                    [("single-hop", "How long did {band} play at the concert {a} went to?")],
                ),
            ],
            [
                (
                    "A",
                    "I played my first open mic night, two songs, my hands were shaking the whole time.",
                    [("temporal", "When did {a} play at an open mic night?")],
                ),
                ("B", "That takes so much courage, I'm proud of you."),
            ],
        ],
    },
}

#: What a turn that brings news may start with: the news is then its second sentence.
OPENERS = [
    "Okay, I have to tell you something that happened this week.",
    "You won't believe what happened since we last talked.",
    "So, big update on my side, and I'm still processing it.",
    "Sorry I went quiet, things have been a lot lately.",
    "Thanks for asking, it's been quite the couple of weeks.",
    "I meant to message you about this the other day.",
    "Honestly, you're the first person I'm telling this to.",
    "Remember what I was saying last time we talked?",
]
#: Lines either speaker says between episodes: reactions, feelings, plans, the day.
CHATTER = [
    "Work has been exhausting this week, I'm counting the hours until Friday.",
    "I've been trying to read more before bed instead of scrolling, it's going okay.",
    "We had friends round for dinner and stayed up far too late talking.",
    "I keep meaning to call my parents more, I feel bad about it.",
    "The weather has been so grey, I'm craving sunshine.",
    "I made a huge pot of soup on Sunday and we've been eating it all week.",
    "Honestly I just need a proper holiday, somewhere warm.",
    "I finally finished that series everyone talks about, the ending was a letdown.",
    "My neighbours are renovating and the drilling starts at eight every morning.",
    "I've been feeling a bit low lately, but talking to you always helps.",
    "We should plan a day out together soon, it's been ages.",
    "I tried a new recipe with lentils and it was surprisingly good.",
    "My phone died in the middle of the day and I felt strangely free.",
    "I'm thinking about cutting my hair short, what do you think?",
    "Sleep has been terrible, I keep waking up at four.",
    "That's such a good point, I hadn't thought of it that way.",
    "I'm so happy for you, you really deserve good things.",
    "Haha, that is so typical of you.",
    "Wait, really? I had no idea!",
    "Let me know how it goes, I'll be thinking of you.",
    "I've started journaling in the mornings, just a page, it helps me think.",
    "We went for a long walk by the lake on Saturday, the light was gorgeous.",
    "My car made a terrible noise this morning, I'm scared to take it in.",
    "I signed up for a newsletter about gardening and now I get three emails a day.",
    "Our internet was down all evening and we played board games instead.",
    "I bumped into an old school friend at the supermarket, so random.",
]


def _chatter(rng: random.Random) -> str:
    """One turn of everyday talk: a sentence, or two."""
    return " ".join(rng.sample(CHATTER, 2 if rng.random() < 0.4 else 1))


def _slots(name: str, rng: random.Random) -> dict[str, Any]:
    out: dict[str, Any] = {k: rng.choice(v) for k, v in SLOTS.items()}
    out.update(a=name, n=rng.randint(12, 480), minutes=rng.randint(48, 75), pct=rng.randint(61, 98))
    return out


#: How a turn's line is written: ``plain`` (``- Maya: …`` in half the conversations,
#: ``**Maya:** …`` in the other half) or ``chat``, as chat logs are exported, the same
#: turns with the minute they were said (``- [1:56 pm] Maya: …``, ``**Maya** (13:56): …``).
STYLES = ("plain", "chat")


def _turn(who: str, text: str, bullet: bool, style: str, at: int) -> str:
    if style == "plain":
        return f"- {who}: {text}" if bullet else f"**{who}:** {text}"
    hour, minute = divmod(at % (24 * 60), 60)
    if bullet:
        return f"- [{(hour - 1) % 12 + 1}:{minute:02d} {'am' if hour < 12 else 'pm'}] {who}: {text}"
    return f"**{who}** ({hour:02d}:{minute:02d}): {text}"


def _conversation(root: Path, n: int, rng: random.Random, style: str = "plain") -> list[Question]:
    """Write conversation *n* under *root* (its turns written in *style*); its questions."""
    folder = f"conv-{n:02d}"
    people = rng.sample(NAMES, 2)
    slots = {p: _slots(p, rng) for p in people}
    for p, other in zip(people, reversed(people), strict=True):
        slots[p]["b"] = other
    threads = {p: rng.sample(sorted(THREADS), PER_PERSON) for p in people}
    # Every episode, in order within its thread; threads interleaved at random.
    queue = [(p, t, i) for p in people for t in threads[p] for i in range(len(THREADS[t]["episodes"]))]
    rng.shuffle(queue)
    queue.sort(key=lambda e: (e[2], rng.random()))  # first episodes first, so threads unfold over the weeks
    bullet = n % 2 == 0
    where: dict[tuple[str, str, int], list[tuple[str, int]]] = {}  # (person, thread, episode) → first line
    questions: list[Question] = []
    day = date(2023, 1, 2) + timedelta(days=rng.randint(0, 300))
    session = 0
    started: dict[str, set[str]] = {p: set() for p in people}
    while queue:
        session += 1
        day += timedelta(days=rng.randint(2, 8))
        rel = f"{folder}/memory/{day.isoformat()}.md"
        hour, minute = rng.randint(7, 22), rng.randint(0, 59)
        lines = [f"# {day.isoformat()}", "", f"## Session {hour:02d}:{minute:02d}", ""]
        first, second = people if session % 2 else people[::-1]
        turns: list[tuple[str, str, list[tuple[str, str]], tuple[str, str, int] | None]] = [
            (first, f"Hey {second}! How have you been since we last talked?", [], None),
            (second, "Good, busy as always, I've got news actually.", [], None),
        ]
        told = [queue.pop(0) for _ in range(min(len(queue), rng.randint(2, 3)))]
        for p, t, i in told:
            started[p].add(t)
            other = slots[p]["b"]
            for _ in range(rng.randint(2, 6)):
                turns.append((rng.choice(people), _chatter(rng), [], None))
            for j, line in enumerate(THREADS[t]["episodes"][i]):
                who, text = (p if line[0] == "A" else other), line[1].format(**slots[p])
                if line[0] == "A" and rng.random() < 0.6:  # news after a sentence of lead-in, as people tell it
                    text = f"{rng.choice(OPENERS)} {text[0].upper()}{text[1:]}"
                asked = [(kind, q.format(**slots[p])) for kind, q in (line[2] if len(line) > 2 else [])]
                turns.append((who, text, asked, (p, t, i) if j == 0 else None))
        for _ in range(rng.randint(2, 6)):
            turns.append((rng.choice(people), _chatter(rng), [], None))
        for p in people:  # the threads already begun come up again, without news
            for t in sorted(started[p]):  # a set: in its order, each process wrote another corpus
                if rng.random() < 0.3:
                    at = rng.randrange(2, len(turns) + 1)
                    turns.insert(at, (p, rng.choice(THREADS[t]["mentions"]).format(**slots[p]), [], None))
        turns.append((first, "Anyway, I should go, talk soon!", [], None))
        turns.append((second, "Take care, bye!", [], None))
        for k, (who, text, asked, episode) in enumerate(turns):
            lines.append(_turn(who, text, bullet, style, hour * 60 + minute + k))
            at = (rel, len(lines))
            questions += [Question(kind, q, folder, (at,)) for kind, q in asked]
            if episode is not None:
                where.setdefault(episode, []).append(at)
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    for p in people:
        for t in threads[p]:
            evidence = tuple(at for i in range(len(THREADS[t]["episodes"])) for at in where.get((p, t, i), []))
            questions.append(Question("multi-hop", THREADS[t]["multi"].format(**slots[p]), folder, evidence))
            questions.append(Question("open-domain", THREADS[t]["infer"].format(**slots[p]), folder, evidence))
    by_kind = {k: [q for q in questions if q.kind == k] for k in ASKED}
    return [q for k, share in ASKED.items() for q in rng.sample(by_kind[k], min(len(by_kind[k]), share))]


def build(root: Path, megabytes: float, seed: int = 0, style: str = "plain") -> list[Question]:
    """Write about *megabytes* of conversations under *root*; their questions."""
    if style not in STYLES:
        raise ValueError(f"style {style!r} is none of {STYLES}")
    rng = random.Random(5000 + seed)
    questions: list[Question] = []
    n = 0
    while n == 0 or sum(f.stat().st_size for f in root.rglob("*.md")) < megabytes * 1_000_000:
        n += 1
        questions += _conversation(root, n, rng, style)
    return questions
