"""The embedded dataset: a seeded, offline stand-in for non-literal news image-text pairs.

Thomas & Kovashka (ECCV 2020, §1 and §4.1) retrieve across news images and article text whose relation is
topical, not descriptive: one image (the scales of justice) illustrates several topics (abortion, same-sex
marriage, immigration), one topic is illustrated with visually unrelated images, and the scraped data holds
boilerplate text (site headers, privacy notices) paired with many images, removed with MinHash. This recipe
generates data with those properties from a seed, so the pipeline runs without downloads:

* text: two news-style sentences (20-60 words) from templates filled with the topic's vocabulary, shared
  background words and a share of words from related topics (:data:`TOPICS`);
* image: a small procedural picture whose dominant motif is shared by 2-3 topics (:data:`MOTIFS`), each topic
  using three unrelated motifs, plus weak topic cues (background tint, an optional accent mark);
* injected duplicates: boilerplate notices paired with many images, and near-identical copies of texts with a
  word-3-shingle Jaccard of at least :data:`NEAR_DUPLICATE_MIN_JACCARD` to their original.

Topics, motifs and duplicate clusters are returned in ``RecipeResult.ground_truth``, never in the manifest.
The dataset card is ``docs/datasets/embedded.md``.
"""

from __future__ import annotations

import colorsys
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image, ImageDraw

from data_recipes.manifest import RecipeResult

DEFAULT_N_PAIRS = 5500
MIN_WORDS = 20
MAX_WORDS = 60
SHINGLE_SIZE = 3
NEAR_DUPLICATE_MIN_JACCARD = 0.85
GENERATOR_VERSION = 1

# --------------------------------------------------------------------------------------------------------------
# Topic design: vocabulary by slot, related topics, motifs with how often the topic uses each.
# --------------------------------------------------------------------------------------------------------------


def _phrases(listing: str) -> tuple[str, ...]:
    """Split a "; "-separated listing (vocabulary kept as prose so the tables stay readable)."""
    return tuple(phrase.strip() for phrase in listing.split(";"))


#: topic -> vocabulary by template slot: A actors (plural subjects), N noun phrases, V past-tense verbs,
#: J adjectives.
TOPIC_VOCAB: dict[str, dict[str, tuple[str, ...]]] = {
    "abortion": {
        "A": _phrases(
            "abortion providers; anti-abortion activists; reproductive rights groups; clinic workers; "
            "pro-life lawmakers; obstetricians; women's health advocates; catholic bishops"
        ),
        "N": _phrases(
            "abortion ban; heartbeat bill; clinic; pregnancy; roe precedent; trimester limit; mifepristone "
            "pill; reproductive care; waiting period; parental consent rule; viability standard; planned "
            "parenthood funding; contraception access; ultrasound requirement; abortion procedure; "
            "miscarriage care; unborn child; clinic buffer zone; gestational limit; abortion pill"
        ),
        "V": _phrases(
            "restricted; defended; challenged; upheld; blocked; criticized; protested; funded; repealed; "
            "endorsed"
        ),
        "J": _phrases(
            "reproductive; prenatal; pro-choice; pro-life; medical; gestational; maternal; contested"
        ),
    },
    "same_sex_marriage": {
        "A": _phrases(
            "gay couples; lgbt advocates; same-sex couples; transgender activists; pride organizers; "
            "conservative pastors; wedding planners; civil rights attorneys"
        ),
        "N": _phrases(
            "marriage license; wedding; gay marriage ruling; civil union; equality act; marriage equality; "
            "pride parade; wedding cake case; adoption right; spousal benefit; obergefell decision; "
            "religious exemption; anti-discrimination law; county clerk office; domestic partnership; "
            "gender identity policy; bathroom bill; discrimination complaint; lgbtq community; honeymoon"
        ),
        "V": _phrases(
            "celebrated; recognized; legalized; refused; opposed; married; affirmed; overturned; welcomed; "
            "denounced"
        ),
        "J": _phrases("same-sex; gay; lesbian; transgender; marital; equal; discriminatory; inclusive"),
    },
    "immigration": {
        "A": _phrases(
            "immigrants; asylum seekers; border agents; refugees; dreamers; deportation officers; migrant "
            "families; immigration lawyers"
        ),
        "N": _phrases(
            "border; deportation; asylum claim; visa program; daca program; travel ban; detention center; "
            "green card; citizenship test; sanctuary city; caravan; work permit; family separation policy; "
            "ice raid; refugee cap; naturalization ceremony; undocumented worker; border crossing; "
            "immigration court backlog; entry permit"
        ),
        "V": _phrases(
            "deported; detained; crossed; admitted; sheltered; naturalized; expelled; sponsored; processed; "
            "resettled"
        ),
        "J": _phrases(
            "undocumented; migrant; foreign; asylum; consular; bilingual; stateless; transnational"
        ),
    },
    "gun_control": {
        "A": _phrases(
            "gun owners; second amendment activists; nra members; shooting survivors; gun control "
            "advocates; firearm dealers; hunters; parents of victims"
        ),
        "N": _phrases(
            "background check; assault weapon; rifle; handgun; mass shooting; firearm; ammunition sale; "
            "concealed carry permit; red flag law; bump stock; magazine limit; gun show; shooting range; "
            "school shooting; gun violence; pistol; gun registry; open carry law; gun lobby; trigger lock"
        ),
        "V": _phrases(
            "banned; armed; shot; purchased; licensed; registered; loaded; confiscated; regulated; carried"
        ),
        "J": _phrases("semiautomatic; armed; lethal; concealed; ballistic; tactical; loaded; unregistered"),
    },
    "elections": {
        "A": _phrases(
            "voters; candidates; campaign staffers; pollsters; election officials; party delegates; "
            "canvassers; incumbents"
        ),
        "N": _phrases(
            "ballot; primary; polling station; campaign; voter turnout; runoff; recount; caucus; debate; "
            "absentee ballot; midterm race; electoral map; campaign donation; voter registration; swing "
            "district; precinct; endorsement; exit poll; gerrymandering case; nomination"
        ),
        "V": _phrases(
            "voted; campaigned; nominated; elected; conceded; canvassed; endorsed; counted; tallied; won"
        ),
        "J": _phrases(
            "electoral; partisan; bipartisan; democratic; republican; incumbent; provisional; statewide"
        ),
    },
    "military": {
        "A": _phrases(
            "troops; soldiers; veterans; generals; navy sailors; marines; defense officials; fighter pilots"
        ),
        "N": _phrases(
            "airstrike; deployment; defense budget; pentagon; missile test; army base; nato alliance; "
            "ceasefire; warship; drone strike; army battalion; combat mission; arms deal; military parade; "
            "draft; insurgency; battlefield; nuclear arsenal; peace treaty; naval blockade"
        ),
        "V": _phrases(
            "deployed; attacked; withdrew; bombed; patrolled; invaded; mobilized; defended; intercepted; "
            "stationed"
        ),
        "J": _phrases("military; naval; tactical; strategic; nuclear; allied; hostile; wartime"),
    },
    "climate": {
        "A": _phrases(
            "climate activists; scientists; environmentalists; coal miners; farmers; energy regulators; "
            "youth strikers; oil executives"
        ),
        "N": _phrases(
            "carbon emission; global warming; paris agreement; heat wave; wildfire; drought; sea level; "
            "renewable energy; solar panel; coal plant; carbon tax; greenhouse gas; glacier; hurricane "
            "season; pipeline; emission target; climate strike; flood; fossil fuel; clean air rule"
        ),
        "V": _phrases(
            "warned; polluted; emitted; melted; flooded; pledged; measured; burned; recycled; warmed"
        ),
        "J": _phrases("environmental; renewable; carbon; arctic; sustainable; toxic; green; warming"),
    },
    "healthcare": {
        "A": _phrases(
            "patients; doctors; nurses; insurers; hospital administrators; pharmacists; medicaid "
            "recipients; public health officials"
        ),
        "N": _phrases(
            "health insurance; obamacare; medicaid expansion; hospital; premium; prescription drug; "
            "vaccine; preexisting condition; insulin price; medical bill; emergency room; health plan; drug "
            "price; opioid epidemic; coverage mandate; clinic; surgery; pandemic; deductible; medicare"
        ),
        "V": _phrases(
            "treated; insured; vaccinated; diagnosed; prescribed; covered; hospitalized; reimbursed; "
            "expanded; cured"
        ),
        "J": _phrases(
            "uninsured; chronic; affordable; clinical; pharmaceutical; preventive; elderly; terminal"
        ),
    },
    "economy": {
        "A": _phrases(
            "investors; economists; workers; small businesses; bankers; shoppers; manufacturers; union "
            "leaders"
        ),
        "N": _phrases(
            "inflation; stock market; interest rate; unemployment rate; tariff; trade deal; recession; "
            "wage; gdp growth; federal reserve; tax cut; budget deficit; jobs report; mortgage rate; "
            "consumer spending; housing market; minimum wage; factory output; retail sale; supply chain"
        ),
        "V": _phrases("invested; hired; earned; borrowed; traded; taxed; spent; lent; profited; rallied"),
        "J": _phrases(
            "economic; fiscal; monetary; quarterly; financial; industrial; inflationary; commercial"
        ),
    },
    "education": {
        "A": _phrases(
            "teachers; students; school boards; college presidents; parents; principals; education "
            "researchers; graduates"
        ),
        "N": _phrases(
            "school; curriculum; tuition; student loan; classroom; standardized test; charter school; "
            "university; scholarship; teacher strike; graduation rate; textbook; kindergarten; school "
            "funding; campus; college admission; reading score; homework policy; lecture hall; school "
            "district"
        ),
        "V": _phrases(
            "taught; enrolled; graduated; studied; tested; tutored; admitted; educated; lectured; expelled"
        ),
        "J": _phrases(
            "academic; educational; public; collegiate; elementary; literate; scholastic; remedial"
        ),
    },
    "technology": {
        "A": _phrases(
            "tech companies; software engineers; hackers; app developers; privacy advocates; startup "
            "founders; social media users; chipmakers"
        ),
        "N": _phrases(
            "smartphone; data breach; artificial intelligence; social network; algorithm; cybersecurity; "
            "cloud service; facial recognition; encryption; data privacy rule; chip shortage; search "
            "engine; online platform; robot; software update; internet outage; antitrust case; app store; "
            "self-driving car; broadband"
        ),
        "V": _phrases(
            "hacked; launched; encrypted; downloaded; streamed; coded; automated; tracked; updated; leaked"
        ),
        "J": _phrases("digital; online; wireless; algorithmic; virtual; encrypted; automated; technological"),
    },
    "policing": {
        "A": _phrases(
            "police officers; detectives; sheriffs; civil liberties groups; prosecutors; police unions; "
            "residents; public defenders"
        ),
        "N": _phrases(
            "police shooting; arrest; body camera; use of force; crime rate; patrol; bail reform; jail; "
            "police department; chokehold; traffic stop; misconduct complaint; prison; sentencing; police "
            "budget; indictment; swat team; neighborhood watch; interrogation; squad car"
        ),
        "V": _phrases(
            "arrested; charged; patrolled; indicted; convicted; sentenced; investigated; handcuffed; "
            "raided; jailed"
        ),
        "J": _phrases("criminal; forensic; violent; judicial; correctional; undercover; fatal; racial"),
    },
}

#: topic -> topics whose words leak into its texts (news stories touch neighbouring issues).
RELATED_TOPICS: dict[str, tuple[str, ...]] = {
    "abortion": ("healthcare", "same_sex_marriage"),
    "same_sex_marriage": ("abortion", "elections"),
    "immigration": ("policing", "economy"),
    "gun_control": ("policing", "military"),
    "elections": ("economy", "immigration"),
    "military": ("gun_control", "technology"),
    "climate": ("economy", "technology"),
    "healthcare": ("abortion", "economy"),
    "economy": ("technology", "elections"),
    "education": ("technology", "economy"),
    "technology": ("education", "economy"),
    "policing": ("gun_control", "immigration"),
}

#: topic -> (motif, probability that a picture of the topic shows it); three unrelated motifs per topic.
TOPIC_MOTIFS: dict[str, tuple[tuple[str, float], ...]] = {
    "abortion": (("scales", 0.45), ("protest_sign", 0.35), ("medical_cross", 0.20)),
    "same_sex_marriage": (("rainbow", 0.45), ("scales", 0.35), ("columns", 0.20)),
    "immigration": (("fence", 0.45), ("flag", 0.35), ("scales", 0.20)),
    "gun_control": (("target", 0.45), ("protest_sign", 0.35), ("badge", 0.20)),
    "elections": (("podium", 0.45), ("flag", 0.35), ("columns", 0.20)),
    "military": (("flag", 0.45), ("target", 0.35), ("globe", 0.20)),
    "climate": (("factory", 0.45), ("protest_sign", 0.35), ("rainbow", 0.20)),
    "healthcare": (("medical_cross", 0.45), ("bar_chart", 0.35), ("columns", 0.20)),
    "economy": (("bar_chart", 0.45), ("factory", 0.35), ("podium", 0.20)),
    "education": (("book", 0.45), ("screen", 0.35), ("bar_chart", 0.20)),
    "technology": (("screen", 0.45), ("globe", 0.35), ("book", 0.20)),
    "policing": (("badge", 0.45), ("fence", 0.35), ("target", 0.20)),
}

TOPICS: tuple[str, ...] = tuple(TOPIC_VOCAB)


def motif_topics() -> dict[str, tuple[str, ...]]:
    """Motif -> the topics it illustrates (each motif serves 2-3 topics, so it is ambiguous on its own)."""
    served: dict[str, list[str]] = {}
    for topic, motifs in TOPIC_MOTIFS.items():
        for motif, _ in motifs:
            served.setdefault(motif, []).append(topic)
    return {motif: tuple(topics) for motif, topics in sorted(served.items())}


MOTIFS: dict[str, tuple[str, ...]] = motif_topics()

ACCENT_SHAPES = ("dot", "triangle", "square", "diamond")


def _topic_cues() -> dict[str, tuple[tuple[int, int, int], str]]:
    """Topic -> (cue colour, accent shape): hues spread evenly round the colour wheel, shapes cycled."""
    cues = {}
    for index, topic in enumerate(TOPICS):
        red, green, blue = colorsys.hsv_to_rgb(index / len(TOPICS), 0.85, 0.9)
        colour = (round(255 * red), round(255 * green), round(255 * blue))
        cues[topic] = (colour, ACCENT_SHAPES[index % len(ACCENT_SHAPES)])
    return cues


#: topic -> (RGB of its weak cues, the background tint and the accent mark; shape of the accent mark).
TOPIC_CUES: dict[str, tuple[tuple[int, int, int], str]] = _topic_cues()

# --------------------------------------------------------------------------------------------------------------
# Shared background vocabulary, templates, boilerplate.
# --------------------------------------------------------------------------------------------------------------

BACKGROUND_VOCAB: dict[str, tuple[str, ...]] = {
    "O": _phrases(
        "officials; lawmakers; critics; analysts; local leaders; the governor; the mayor; a spokesperson; "
        "the white house; congress; state legislators; federal judges; the state senate; county "
        "commissioners; the administration; city council members; a federal court; the attorney general"
    ),
    "P": _phrases(
        "Washington; Texas; California; Ohio; Florida; New York; Georgia; Arizona; Michigan; Chicago; "
        "Atlanta; Denver; Boston; Seattle; Pennsylvania; Iowa; Nevada; Virginia; Wisconsin; Oregon; "
        "Minnesota; North Carolina; Kentucky; Missouri; New Mexico; Colorado; Tennessee; Houston; Phoenix; "
        "Philadelphia"
    ),
    "D": _phrases(
        "on Monday; on Tuesday; on Wednesday; on Thursday; on Friday; over the weekend; last week; earlier "
        "this month; late on Thursday; this spring; in recent days; on Sunday night"
    ),
    "Q": _phrases(
        "dozens of; hundreds of; thousands of; several; more than 200; a handful of; a coalition of; many; "
        "nearly 500; a group of"
    ),
    "S": _phrases(
        "according to court records; local media reported; the associated press reported; a spokesperson "
        "said; according to a statement; officials said; sources said; according to a new poll; records "
        "show; reporters were told"
    ),
}

#: first sentences (the lead). {X} is an independent draw from slot X; [a|b] picks one alternative, so
#: that the fixed words two texts share stay few (their word-shingle Jaccard stays low).
LEAD_TEMPLATES: tuple[str, ...] = (
    "{A} in {P} {V} the {J} {N} {D}, a move {O} [said|warned|argued] could [reshape|upend|settle] the {N} "
    "[debate|fight|dispute].",
    "{D}, {Q} {A} [gathered|rallied|met] in {P} after {O} {V} [a|the] {J} {N} [tied to|linked to|over] the {N}.",
    "The {J} {N} {V} by {O} in {P} [drew sharp reactions from|angered|was praised by] {A} and {A}.",
    "{O} {V} [a long-awaited|a disputed|the latest] {N} {D}, [the latest turn in|a new chapter in|escalating] "
    "[a fight|the battle|the feud] over the {J} {N}.",
    "In {P}, {A} {V} [plans for|a proposal on|limits on] [a|the] {J} {N}, [arguing|saying|insisting] that the "
    "{N} had been [ignored|mishandled|neglected] for years.",
    "A {J} {N} in {P} has [divided|split|angered] {A}, who {V} the [proposal|measure|plan] {D}.",
    "{Q} {A} {V} the {N} in {P} {D}, [calling|describing] the {J} {N} [unfair|reckless|overdue|a mistake].",
    "{O} in {P} {V} the {J} {N} {D} [despite objections from|over protests by|with support from] {A}.",
    "A [new|recent|leaked] [report|study|survey] on the {J} {N} [found|showed|suggested] that {Q} {A} in {P} "
    "{V} the {N} [last year|in 2019|this decade].",
    "{A} and {A} [clashed|sparred|argued] {D} over [a|the] {J} {N} that {O} {V} in {P}.",
    "[Facing pressure from|Urged on by|Under fire from] {A}, {O} {V} the {N} {D}.",
    "What [began|started] as a [dispute|quarrel|debate] over the {N} in {P} has [grown|turned] into a {J} "
    "[fight|battle|standoff] among {A}.",
)

#: second sentences (the follow-up).
FOLLOW_TEMPLATES: tuple[str, ...] = (
    "{O} [said|predicted|warned] the {N} would [affect|hurt|help] {Q} {A} and {V} the {J} {N}.",
    "[Critics|Opponents] [argue|say|contend] the {N} {V} {A}, while [supporters|backers|allies] [say|insist] "
    "the {J} {N} is [overdue|necessary|modest].",
    "The {N} comes as {A} [across|in] {P} face [a|an uncertain|a costly] {J} {N}, {S}.",
    "The [dispute|case|fight] over the {N} is [expected|likely|set] to reach {O} before the {J} {N}, {S}.",
    "It was [not immediately|still not|not yet] clear how the {J} {N} would [change|affect] the {N} for {A}.",
    "[Similar|Comparable|Rival] [measures|proposals|bills] on the {N} were {V} in {P} and {P} {D}.",
    "{A} [vowed|promised|pledged] to keep [fighting|challenging|pressing] the {J} {N}, {S}.",
    "The {J} {N} has become a [flashpoint|rallying cry|sore point] for {A} ahead of the {N}.",
    "{O} [did not respond to|declined|ignored] [requests|questions|calls] [for comment on|about] the {J} {N} {D}.",
    "[Analysts|Experts|Observers] expect the {J} {N} to [shape|define|color] how {A} [view|judge] the {N}.",
    "{S}, {Q} {A} have {V} the {N} [since it took effect|since the spring|ever since].",
    "[Polls|Surveys] show {A} [remain|are] [split|divided] on the {J} {N} and the {N}.",
)

#: motif -> phrases that now and then name what the picture shows (news text rarely describes its image).
MOTIF_PHRASES: dict[str, tuple[str, ...]] = {
    "scales": ("outside the courthouse", "before the justices"),
    "protest_sign": ("as demonstrators waved signs", "at a crowded rally"),
    "medical_cross": ("at a local hospital", "near the clinic entrance"),
    "rainbow": ("under rainbow banners", "during a colorful parade"),
    "columns": ("on the steps of the capitol", "at the supreme court"),
    "fence": ("along the fence line", "behind a steel barrier"),
    "flag": ("beneath a row of flags", "as flags flew at half staff"),
    "target": ("at a firing range", "near a practice target"),
    "badge": ("as officers stood guard", "wearing their badges"),
    "podium": ("from behind a podium", "at a press conference"),
    "globe": ("at an international summit", "around the world"),
    "factory": ("near a smoking power plant", "outside an old factory"),
    "bar_chart": ("as new charts showed", "according to new figures"),
    "book": ("in a crowded library", "over a stack of books"),
    "screen": ("on a laptop screen", "in a livestream"),
}

#: site text that failed scrapes pair with many images (Politics, §4.1); identical copies form a cluster.
BOILERPLATE_TEXTS: tuple[str, ...] = (
    "Subscribe to our newsletter for the latest headlines. Sign in to your account to continue reading, "
    "manage your preferences and get unlimited access to breaking news, opinion and video from our newsroom.",
    "We use cookies and similar technologies to improve your experience, personalize content and ads, and "
    "analyze our traffic. By continuing to browse this site you agree to our privacy policy and terms of "
    "service.",
    "Copyright The Daily Courier. All rights reserved. This material may not be published, broadcast, "
    "rewritten or redistributed without permission. Follow us on social media and download our app for alerts.",
    "Sorry, this page is not available in your region. Please enable javascript and disable your ad blocker, "
    "then reload the page to read this story and other articles from our site.",
)

#: what a republished copy appends (wire credits, update notes).
NEAR_DUPLICATE_SUFFIXES: tuple[str, ...] = (
    "Reporting by staff.",
    "This story has been updated.",
    "(AP)",
    "Updated at 5 p.m.",
    "Contributing: wire reports.",
    "More to come.",
    "Editing by the metro desk.",
)

#: share of topic-word slots filled from a related topic: stories touch neighbouring issues.
RELATED_WORD_SHARE = 0.3
#: how often a lead names what its picture shows; news text seldom describes its photo.
MOTIF_MENTION_PROBABILITY = 0.2
#: the weak topic cues (accent mark, background tint) are kept weaker than the motif: a linear model on
#: pixels stays below the motif rule (measured in docs/datasets/embedded.md).
ACCENT_PROBABILITY = 0.5
TINT_WEIGHT_RANGE = (0.05, 0.25)
#: chance of a second, smaller motif of any topic: news photos show more than one thing.
DISTRACTOR_PROBABILITY = 0.3

_SLOT = re.compile(r"\{([A-Z])\}")
_ALTERNATIVES = re.compile(r"\[([^\]]+)\]")
_WORD = re.compile(r"[a-z0-9']+")
_ARTICLE_BEFORE_VOWEL = re.compile(r"\b([Aa]) (?=[aeiou])")


# --------------------------------------------------------------------------------------------------------------
# Text.
# --------------------------------------------------------------------------------------------------------------


def words(text: str) -> list[str]:
    """Lower-case word tokens (letters, digits, apostrophes): how lengths and shingles are counted here."""
    return _WORD.findall(text.lower())


def word_shingles(text: str, size: int = SHINGLE_SIZE) -> set[tuple[str, ...]]:
    """The set of ``size`` consecutive words of ``text`` (a text shorter than ``size`` is one shingle)."""
    if size < 1:
        raise ValueError(f"shingle size must be >= 1, got {size}")
    tokens = words(text)
    if len(tokens) <= size:
        return {tuple(tokens)}
    return {tuple(tokens[i : i + size]) for i in range(len(tokens) - size + 1)}


def shingle_jaccard(a: str, b: str, size: int = SHINGLE_SIZE) -> float:
    """Exact Jaccard similarity of the word-shingle sets of two texts (what MinHash estimates)."""
    sa, sb = word_shingles(a, size), word_shingles(b, size)
    return len(sa & sb) / len(sa | sb)


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]


def _fill(template: str, topic: str, rng: np.random.Generator) -> str:
    """Fill each slot independently: topic words, with a share from a related topic, or background words."""

    def draw(match: re.Match[str]) -> str:
        slot = match.group(1)
        if slot in BACKGROUND_VOCAB:
            return _pick(rng, BACKGROUND_VOCAB[slot])
        source = topic
        if rng.random() < RELATED_WORD_SHARE:
            source = _pick(rng, RELATED_TOPICS[topic])
        return _pick(rng, TOPIC_VOCAB[source][slot])

    def choose(match: re.Match[str]) -> str:
        return _pick(rng, tuple(match.group(1).split("|")))

    return _ARTICLE_BEFORE_VOWEL.sub(r"\1n ", _SLOT.sub(draw, _ALTERNATIVES.sub(choose, template)))


def _sentence_case(sentence: str) -> str:
    return sentence[:1].upper() + sentence[1:]


def _news_text(topic: str, motif: str, rng: np.random.Generator) -> str:
    """Two news sentences about ``topic`` (20-60 words); sometimes one names the picture's ``motif``."""
    while True:
        lead = _fill(_pick(rng, LEAD_TEMPLATES), topic, rng)
        follow = _fill(_pick(rng, FOLLOW_TEMPLATES), topic, rng)
        if rng.random() < MOTIF_MENTION_PROBABILITY:
            lead = f"{lead[:-1]} {_pick(rng, MOTIF_PHRASES[motif])}."
        text = f"{_sentence_case(lead)} {_sentence_case(follow)}"
        if MIN_WORDS <= len(words(text)) <= MAX_WORDS:
            return text


def _near_duplicate(original: str, rng: np.random.Generator) -> str:
    """A republished copy: one or two words swapped for filler words and/or a credit line appended,
    redrawn until its shingle Jaccard with ``original`` is at least ``NEAR_DUPLICATE_MIN_JACCARD``."""
    tokens = original.split(" ")
    while True:
        edited = list(tokens)
        n_swaps = int(rng.integers(0, 3))
        for _ in range(n_swaps):
            position = int(rng.integers(len(edited)))
            punctuation = edited[position][-1] if edited[position][-1] in ",." else ""
            edited[position] = _pick(rng, ("also", "now", "again", "still", "reportedly")) + punctuation
        if n_swaps == 0 or rng.random() < 0.5:
            edited.append(_pick(rng, NEAR_DUPLICATE_SUFFIXES))
        copy = " ".join(edited)
        if (
            copy != original
            and len(words(copy)) <= MAX_WORDS
            and shingle_jaccard(copy, original) >= NEAR_DUPLICATE_MIN_JACCARD
        ):
            return copy


# --------------------------------------------------------------------------------------------------------------
# Images: motifs drawn in unit coordinates on a square layer, then jittered and composited.
# --------------------------------------------------------------------------------------------------------------

Colour = tuple[int, int, int, int]
MotifPainter = Callable[[ImageDraw.ImageDraw, float, list[Colour]], None]

#: motif -> base colours (RGB) before jitter.
MOTIF_PALETTES: dict[str, tuple[tuple[int, int, int], ...]] = {
    "scales": ((190, 150, 40), (120, 90, 30), (220, 190, 90)),
    "protest_sign": ((240, 240, 225), (130, 90, 50), (30, 30, 30)),
    "medical_cross": ((210, 30, 40), (250, 250, 250), (170, 20, 30)),
    "rainbow": ((220, 40, 40), (240, 150, 30), (60, 150, 220)),
    "columns": ((225, 220, 205), (160, 155, 145), (120, 115, 105)),
    "fence": ((110, 110, 115), (70, 70, 75), (150, 150, 155)),
    "flag": ((200, 30, 45), (245, 245, 245), (30, 50, 130)),
    "target": ((210, 30, 30), (245, 245, 245), (30, 30, 30)),
    "badge": ((210, 170, 40), (40, 60, 120), (240, 210, 90)),
    "podium": ((120, 70, 35), (40, 40, 40), (200, 170, 120)),
    "globe": ((40, 110, 200), (60, 160, 70), (230, 240, 250)),
    "factory": ((110, 90, 80), (90, 90, 95), (190, 190, 190)),
    "bar_chart": ((40, 120, 200), (230, 120, 40), (40, 40, 40)),
    "book": ((150, 40, 40), (245, 240, 225), (60, 60, 60)),
    "screen": ((40, 40, 45), (80, 170, 230), (160, 160, 165)),
}


def _scaled(points: list[tuple[float, float]], s: float) -> list[tuple[float, float]]:
    return [(x * s, y * s) for x, y in points]


def _paint_scales(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.05))
    d.line(_scaled([(0.5, 0.12), (0.5, 0.85)], s), fill=c[1], width=w)
    d.polygon(_scaled([(0.3, 0.92), (0.7, 0.92), (0.5, 0.82)], s), fill=c[1])
    d.line(_scaled([(0.12, 0.25), (0.88, 0.25)], s), fill=c[0], width=w)
    for x in (0.2, 0.8):
        d.line(_scaled([(x, 0.25), (x - 0.1, 0.55)], s), fill=c[0], width=max(1, w // 2))
        d.line(_scaled([(x, 0.25), (x + 0.1, 0.55)], s), fill=c[0], width=max(1, w // 2))
        d.chord([(x - 0.14) * s, 0.45 * s, (x + 0.14) * s, 0.65 * s], 0, 180, fill=c[2])
    d.ellipse(_scaled([(0.45, 0.08), (0.55, 0.18)], s), fill=c[2])


def _paint_protest_sign(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.line(_scaled([(0.5, 0.55), (0.5, 0.98)], s), fill=c[1], width=max(1, round(s * 0.06)))
    d.rectangle(
        _scaled([(0.12, 0.1), (0.88, 0.6)], s), fill=c[0], outline=c[1], width=max(1, round(s * 0.02))
    )
    for row, length in ((0.22, 0.6), (0.34, 0.5), (0.46, 0.55)):
        d.line(_scaled([(0.2, row), (0.2 + length, row)], s), fill=c[2], width=max(1, round(s * 0.05)))


def _paint_medical_cross(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(
        _scaled([(0.05, 0.05), (0.95, 0.95)], s), fill=c[1], outline=c[2], width=max(1, round(s * 0.04))
    )
    d.rectangle(_scaled([(0.38, 0.18), (0.62, 0.82)], s), fill=c[0])
    d.rectangle(_scaled([(0.18, 0.38), (0.82, 0.62)], s), fill=c[0])


def _paint_rainbow(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    bands = (c[0], c[1], (240, 220, 40, 255), (60, 170, 70, 255), c[2], (120, 60, 170, 255))
    width = max(1, round(s * 0.06))
    for i, colour in enumerate(bands):
        inset = 0.05 + i * 0.06
        d.arc(
            [inset * s, (0.2 + inset) * s, (1 - inset) * s, (1.2 - inset) * s],
            180,
            360,
            fill=colour,
            width=width,
        )


def _paint_columns(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(_scaled([(0.08, 0.3), (0.92, 0.3), (0.5, 0.08)], s), fill=c[0], outline=c[2])
    d.rectangle(_scaled([(0.1, 0.3), (0.9, 0.36)], s), fill=c[1])
    for x in (0.16, 0.34, 0.52, 0.7):
        d.rectangle(_scaled([(x, 0.36), (x + 0.1, 0.8)], s), fill=c[0], outline=c[2])
    d.rectangle(_scaled([(0.06, 0.8), (0.94, 0.88)], s), fill=c[1])
    d.rectangle(_scaled([(0.02, 0.88), (0.98, 0.95)], s), fill=c[2])


def _paint_fence(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.05))
    for x in (0.1, 0.3, 0.5, 0.7, 0.9):
        d.line(_scaled([(x, 0.2), (x, 0.95)], s), fill=c[1], width=w)
    for y in (0.4, 0.7):
        d.line(_scaled([(0.05, y), (0.95, y)], s), fill=c[0], width=max(1, w // 2))
    zigzag = [(0.05 + 0.1 * i, 0.1 if i % 2 else 0.2) for i in range(10)]
    d.line(_scaled(zigzag, s), fill=c[2], width=max(1, w // 2))


def _paint_flag(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.line(_scaled([(0.1, 0.05), (0.1, 0.98)], s), fill=(90, 90, 90, 255), width=max(1, round(s * 0.04)))
    for i in range(7):
        top = 0.1 + i * 0.07
        d.rectangle(_scaled([(0.12, top), (0.92, top + 0.07)], s), fill=c[0] if i % 2 == 0 else c[1])
    d.rectangle(_scaled([(0.12, 0.1), (0.45, 0.38)], s), fill=c[2])


def _paint_target(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    for i, radius in enumerate((0.45, 0.35, 0.25, 0.15, 0.06)):
        d.ellipse(
            _scaled([(0.5 - radius, 0.5 - radius), (0.5 + radius, 0.5 + radius)], s),
            fill=c[0] if i % 2 == 0 else c[1],
        )
    w = max(1, round(s * 0.02))
    d.line(_scaled([(0.5, 0.0), (0.5, 1.0)], s), fill=c[2], width=w)
    d.line(_scaled([(0.0, 0.5), (1.0, 0.5)], s), fill=c[2], width=w)


def _paint_badge(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(_scaled([(0.05, 0.05), (0.95, 0.95)], s), fill=c[1])
    star = []
    for k in range(10):
        radius = 0.4 if k % 2 == 0 else 0.17
        angle = -math.pi / 2 + k * math.pi / 5
        star.append((0.5 + radius * math.cos(angle), 0.5 + radius * math.sin(angle)))
    d.polygon(_scaled(star, s), fill=c[0], outline=c[2])


def _paint_podium(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(_scaled([(0.22, 0.45), (0.78, 0.45), (0.7, 0.98), (0.3, 0.98)], s), fill=c[0])
    d.rectangle(_scaled([(0.18, 0.4), (0.82, 0.47)], s), fill=c[2])
    d.line(_scaled([(0.5, 0.4), (0.58, 0.15)], s), fill=c[1], width=max(1, round(s * 0.03)))
    d.ellipse(_scaled([(0.53, 0.07), (0.65, 0.19)], s), fill=c[1])
    d.ellipse(_scaled([(0.42, 0.62), (0.58, 0.78)], s), outline=c[2], width=max(1, round(s * 0.02)))


def _paint_globe(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.ellipse(_scaled([(0.08, 0.08), (0.92, 0.92)], s), fill=c[0])
    d.ellipse(_scaled([(0.25, 0.25), (0.5, 0.55)], s), fill=c[1])
    d.ellipse(_scaled([(0.55, 0.45), (0.78, 0.8)], s), fill=c[1])
    w = max(1, round(s * 0.015))
    for inset in (0.3, 0.42):
        d.ellipse(_scaled([(inset, 0.08), (1 - inset, 0.92)], s), outline=c[2], width=w)
    for y in (0.3, 0.5, 0.7):
        d.line(_scaled([(0.1, y), (0.9, y)], s), fill=c[2], width=w)


def _paint_factory(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.rectangle(_scaled([(0.05, 0.55), (0.95, 0.95)], s), fill=c[0])
    saw = [(0.05, 0.55), (0.2, 0.42), (0.2, 0.55), (0.35, 0.42), (0.35, 0.55), (0.5, 0.42), (0.5, 0.55)]
    d.polygon(_scaled(saw, s), fill=c[0])
    for x in (0.62, 0.78):
        d.rectangle(_scaled([(x, 0.2), (x + 0.08, 0.55)], s), fill=c[1])
    for i, (x, y) in enumerate(((0.68, 0.12), (0.76, 0.05), (0.86, 0.1))):
        radius = 0.06 + 0.02 * i
        d.ellipse(_scaled([(x - radius, y - radius), (x + radius, y + radius)], s), fill=c[2])
    for x in (0.15, 0.3, 0.45):
        d.rectangle(_scaled([(x, 0.68), (x + 0.08, 0.78)], s), fill=(230, 210, 120, 255))


def _paint_bar_chart(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    w = max(1, round(s * 0.03))
    d.line(_scaled([(0.1, 0.05), (0.1, 0.92), (0.95, 0.92)], s), fill=c[2], width=w)
    for i, height in enumerate((0.3, 0.5, 0.42, 0.7, 0.82)):
        left = 0.16 + i * 0.16
        d.rectangle(_scaled([(left, 0.9 - height), (left + 0.11, 0.9)], s), fill=c[0] if i % 2 == 0 else c[1])
    d.line(
        _scaled([(0.2, 0.55), (0.38, 0.38), (0.55, 0.45), (0.72, 0.2), (0.9, 0.08)], s), fill=c[2], width=w
    )


def _paint_book(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.polygon(
        _scaled([(0.05, 0.25), (0.5, 0.32), (0.95, 0.25), (0.95, 0.85), (0.5, 0.92), (0.05, 0.85)], s),
        fill=c[0],
    )
    d.polygon(_scaled([(0.09, 0.22), (0.49, 0.29), (0.49, 0.86), (0.09, 0.8)], s), fill=c[1])
    d.polygon(_scaled([(0.51, 0.29), (0.91, 0.22), (0.91, 0.8), (0.51, 0.86)], s), fill=c[1])
    w = max(1, round(s * 0.015))
    for k in range(4):
        y = 0.36 + k * 0.11
        d.line(_scaled([(0.14, y), (0.44, y + 0.04)], s), fill=c[2], width=w)
        d.line(_scaled([(0.56, y + 0.04), (0.86, y)], s), fill=c[2], width=w)


def _paint_screen(d: ImageDraw.ImageDraw, s: float, c: list[Colour]) -> None:
    d.rectangle(_scaled([(0.15, 0.12), (0.85, 0.62)], s), fill=c[0])
    d.rectangle(_scaled([(0.19, 0.16), (0.81, 0.58)], s), fill=c[1])
    w = max(1, round(s * 0.02))
    for k in range(3):
        y = 0.25 + k * 0.1
        d.line(_scaled([(0.25, y), (0.25 + 0.45 - 0.1 * k, y)], s), fill=c[0], width=w)
    d.polygon(_scaled([(0.1, 0.66), (0.9, 0.66), (1.0, 0.86), (0.0, 0.86)], s), fill=c[2])
    d.line(_scaled([(0.35, 0.79), (0.65, 0.79)], s), fill=c[0], width=w)


MOTIF_PAINTERS: dict[str, MotifPainter] = {
    "scales": _paint_scales,
    "protest_sign": _paint_protest_sign,
    "medical_cross": _paint_medical_cross,
    "rainbow": _paint_rainbow,
    "columns": _paint_columns,
    "fence": _paint_fence,
    "flag": _paint_flag,
    "target": _paint_target,
    "badge": _paint_badge,
    "podium": _paint_podium,
    "globe": _paint_globe,
    "factory": _paint_factory,
    "bar_chart": _paint_bar_chart,
    "book": _paint_book,
    "screen": _paint_screen,
}


def _jitter(rgb: tuple[int, int, int], rng: np.random.Generator, spread: float, brightness: float) -> Colour:
    values = np.clip(np.asarray(rgb, dtype=float) * brightness + rng.normal(0.0, spread, 3), 0, 255)
    return (int(values[0]), int(values[1]), int(values[2]), 255)


def _background(topic: str, size: int, rng: np.random.Generator) -> Image.Image:
    """A muted random colour pulled slightly towards the topic's cue colour, with a gradient and noise."""
    base = rng.uniform(110, 230, 3)
    tint_weight = rng.uniform(*TINT_WEIGHT_RANGE)
    colour = (1 - tint_weight) * base + tint_weight * np.asarray(TOPIC_CUES[topic][0], dtype=float)
    angle = rng.uniform(0, 2 * math.pi)
    ramp = np.linspace(-1.0, 1.0, size)
    gradient = math.cos(angle) * ramp[None, :] + math.sin(angle) * ramp[:, None]
    pixels = colour[None, None, :] + rng.uniform(5, 25) * gradient[:, :, None]
    pixels = pixels + rng.normal(0.0, 6.0, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


def _clutter(image: Image.Image, rng: np.random.Generator) -> None:
    """Background shapes in random colours, so no pixel region is reserved for the motif."""
    draw = ImageDraw.Draw(image)
    size = image.width
    for _ in range(int(rng.integers(2, 7))):
        colour = tuple(int(v) for v in rng.integers(30, 240, 3))
        x0, y0 = (float(v) for v in rng.uniform(0, size, 2))
        x1, y1 = x0 + rng.uniform(-0.4, 0.4) * size, y0 + rng.uniform(-0.4, 0.4) * size
        box = [min(x0, x1), min(y0, y1), max(x0, x1), max(y0, y1)]
        width = max(1, round(size / 48))
        kind = int(rng.integers(3))
        if kind == 0:
            draw.line([x0, y0, x1, y1], fill=colour, width=width)
        elif kind == 1:
            draw.ellipse(box, outline=colour, width=width)
        else:
            draw.rectangle(box, outline=colour, width=width)


def _place_motif(image: Image.Image, motif: str, scale: float, rng: np.random.Generator) -> None:
    """Draw ``motif`` (2x supersampled) with colour jitter, flip, rotation, scale and position jitter."""
    size = image.width
    side = max(8, round(scale * size))
    brightness = rng.uniform(0.8, 1.15)
    colours = [_jitter(rgb, rng, 18.0, brightness) for rgb in MOTIF_PALETTES[motif]]
    layer = Image.new("RGBA", (2 * side, 2 * side), (0, 0, 0, 0))
    MOTIF_PAINTERS[motif](ImageDraw.Draw(layer), 2 * side, colours)
    if rng.random() < 0.5:
        layer = layer.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    layer = layer.rotate(rng.uniform(-25, 25), resample=Image.Resampling.BICUBIC, expand=True)
    layer = layer.resize((max(1, layer.width // 2), max(1, layer.height // 2)), Image.Resampling.LANCZOS)
    centre_x, centre_y = (size / 2 + rng.uniform(-0.22, 0.22, 2) * size).tolist()
    image.paste(layer, (round(centre_x - layer.width / 2), round(centre_y - layer.height / 2)), mask=layer)


def _accent(image: Image.Image, topic: str, rng: np.random.Generator) -> None:
    """The topic's small accent mark (a weak cue, like a recurring logo or colour in a section's photos)."""
    colour, shape = TOPIC_CUES[topic]
    fill = _jitter(colour, rng, 12.0, 1.0)
    size = image.width
    side = rng.uniform(0.08, 0.14) * size
    x, y = (float(v) for v in rng.uniform(0, size - side, 2))
    draw = ImageDraw.Draw(image)
    if shape == "dot":
        draw.ellipse([x, y, x + side, y + side], fill=fill)
    elif shape == "square":
        draw.rectangle([x, y, x + side, y + side], fill=fill)
    elif shape == "triangle":
        draw.polygon([(x, y + side), (x + side, y + side), (x + side / 2, y)], fill=fill)
    else:
        half = side / 2
        draw.polygon([(x + half, y), (x + side, y + half), (x + half, y + side), (x, y + half)], fill=fill)


def render_image(topic: str, motif: str, size: int, rng: np.random.Generator) -> Image.Image:
    """One picture for a pair of ``topic`` whose dominant motif is ``motif`` (RGB, ``size`` x ``size``).

    The motif is shared with other topics; what is specific to the topic is weak: a background tint and,
    with probability ``ACCENT_PROBABILITY``, a small accent mark. Clutter, a smaller distractor motif,
    jitter and noise keep the mapping from pixels to topic hard.
    """
    if topic not in TOPIC_CUES or motif not in MOTIF_PAINTERS:
        raise KeyError(f"unknown topic {topic!r} or motif {motif!r}; see TOPICS and MOTIFS in {__name__}")
    image = _background(topic, size, rng)
    _clutter(image, rng)
    if rng.random() < DISTRACTOR_PROBABILITY:
        others = tuple(m for m in MOTIF_PAINTERS if m != motif)
        _place_motif(image, _pick(rng, others), rng.uniform(0.18, 0.3), rng)
    _place_motif(image, motif, rng.uniform(0.45, 0.8), rng)
    if rng.random() < ACCENT_PROBABILITY:
        _accent(image, topic, rng)
    pixels = np.asarray(image, dtype=float) + rng.normal(0.0, 4.0, (size, size, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), mode="RGB")


# --------------------------------------------------------------------------------------------------------------
# The recipe.
# --------------------------------------------------------------------------------------------------------------


def _draw_motif(topic: str, rng: np.random.Generator) -> str:
    motifs, weights = zip(*TOPIC_MOTIFS[topic], strict=True)
    return motifs[int(rng.choice(len(motifs), p=np.asarray(weights) / sum(weights)))]


def _cluster_sizes(total: int, rng: np.random.Generator) -> list[int]:
    """Split ``total`` near-duplicate copies into clusters of 1-3 copies each (mostly 1)."""
    sizes: list[int] = []
    while sum(sizes) < total:
        sizes.append(min(int(rng.choice([1, 2, 3], p=[0.6, 0.3, 0.1])), total - sum(sizes)))
    return sizes


def _injected_counts(n_pairs: int, boilerplate_share: float, near_duplicate_share: float) -> tuple[int, int]:
    """(boilerplate pairs, near-duplicate copies); a notice seen once is no duplicate, so never just one."""
    n_boilerplate = round(n_pairs * boilerplate_share)
    return (0 if n_boilerplate == 0 else max(2, n_boilerplate)), round(n_pairs * near_duplicate_share)


def _check_options(
    n_pairs: int, seed: int, image_size: int, boilerplate_share: float, near_duplicate_share: float
) -> None:
    if not 0 <= boilerplate_share <= 0.5 or not 0 <= near_duplicate_share <= 0.5:
        raise ValueError(
            f"boilerplate_share={boilerplate_share} and near_duplicate_share={near_duplicate_share} must each "
            "lie in [0, 0.5]; most pairs must stay original"
        )
    if n_pairs < 2 * len(TOPICS):
        raise ValueError(f"n_pairs={n_pairs} is too small; use at least {2 * len(TOPICS)} (two per topic)")
    n_boilerplate, n_near = _injected_counts(n_pairs, boilerplate_share, near_duplicate_share)
    n_original = n_pairs - n_boilerplate - n_near
    if n_near > n_original:
        raise ValueError(
            f"{n_near} near-duplicate copies need at least as many originals, but only {n_original} remain; "
            "lower near_duplicate_share or boilerplate_share"
        )
    if seed < 0:
        raise ValueError(f"seed={seed} must be a non-negative integer")
    if image_size < 16:
        raise ValueError(f"image_size={image_size} is too small to draw a motif; use 16 or more (default 64)")


Row = dict[str, str | None]


def _original_rows(n_original: int, rng: np.random.Generator) -> list[Row]:
    """Pairs of a uniformly drawn topic, a motif drawn from the topic's motif shares, and a news text."""
    rows: list[Row] = []
    for _ in range(n_original):
        topic = _pick(rng, TOPICS)
        motif = _draw_motif(topic, rng)
        text = _news_text(topic, motif, rng)
        rows.append({"topic": topic, "motif": motif, "text": text, "kind": "original", "dup_cluster": None})
    return rows


def _add_near_duplicates(rows: list[Row], n_copies: int, rng: np.random.Generator) -> int:
    """Append ``n_copies`` republished copies of randomly chosen originals; returns the number of clusters."""
    sizes = _cluster_sizes(n_copies, rng)
    sources = rng.choice(len(rows), size=len(sizes), replace=False)
    for cluster, (source, cluster_copies) in enumerate(zip(sources.tolist(), sizes, strict=True)):
        original = rows[source]
        original["dup_cluster"] = f"nd-{cluster:04d}"
        topic = str(original["topic"])
        for _ in range(cluster_copies):
            # a republished story keeps its topic but runs with a picture of its own
            rows.append(
                {
                    "topic": topic,
                    "motif": _draw_motif(topic, rng),
                    "text": _near_duplicate(str(original["text"]), rng),
                    "kind": "near_duplicate",
                    "dup_cluster": original["dup_cluster"],
                }
            )
    return len(sizes)


def _add_boilerplate(rows: list[Row], n_boilerplate: int, rng: np.random.Generator) -> int:
    """Append ``n_boilerplate`` pairs of a site notice and a picture of a random topic; returns the number
    of notices used. Every notice used appears at least twice, so it is a duplicate cluster."""
    n_notices = min(len(BOILERPLATE_TEXTS), n_boilerplate // 2)
    notices = [k % n_notices for k in range(2 * n_notices)]
    notices += rng.integers(0, n_notices, n_boilerplate - len(notices)).tolist() if n_notices else []
    for notice in notices:
        topic = _pick(rng, TOPICS)
        rows.append(
            {
                "topic": topic,
                "motif": _draw_motif(topic, rng),
                "text": BOILERPLATE_TEXTS[notice],
                "kind": "boilerplate",
                "dup_cluster": f"bp-{notice}",
            }
        )
    return n_notices


def build(
    raw_dir: Path | None,
    work_dir: Path,
    *,
    n_pairs: int = DEFAULT_N_PAIRS,
    seed: int = 0,
    image_size: int = 64,
    boilerplate_share: float = 0.05,
    near_duplicate_share: float = 0.05,
) -> RecipeResult:
    """Generate the embedded dataset: PNGs under ``work_dir/images/``, the manifest and the ground truth.

    ``raw_dir`` is unused (nothing is downloaded). The same arguments give byte-identical images and equal
    data frames. ``ground_truth`` has one row per pair: ``pair_id``, ``topic`` (of the picture, so also for
    boilerplate pairs), ``dup_cluster`` (``bp-N`` for a boilerplate notice, ``nd-N`` for a near-duplicate
    cluster with its original, else None), ``kind`` (original / boilerplate / near_duplicate) and ``motif``.
    """
    del raw_dir
    _check_options(n_pairs, seed, image_size, boilerplate_share, near_duplicate_share)
    rng = np.random.default_rng([seed, GENERATOR_VERSION])
    n_boilerplate, n_near = _injected_counts(n_pairs, boilerplate_share, near_duplicate_share)
    n_original = n_pairs - n_boilerplate - n_near

    rows = _original_rows(n_original, rng)
    n_clusters = _add_near_duplicates(rows, n_near, rng)
    n_notices = _add_boilerplate(rows, n_boilerplate, rng)
    rows = [rows[i] for i in rng.permutation(len(rows)).tolist()]
    image_dir = Path(work_dir) / "images"
    image_dir.mkdir(parents=True, exist_ok=True)
    pair_ids = [f"emb-{i:06d}" for i in range(len(rows))]
    image_paths = []
    for index, (pair_id, row) in enumerate(zip(pair_ids, rows, strict=True)):
        image_rng = np.random.default_rng([seed, GENERATOR_VERSION, image_size, index])
        path = (image_dir / f"{pair_id}.png").resolve()
        render_image(str(row["topic"]), str(row["motif"]), image_size, image_rng).save(
            path, format="PNG", compress_level=1
        )
        image_paths.append(str(path))

    manifest = pd.DataFrame(
        {"pair_id": pair_ids, "image_path": image_paths, "text": [r["text"] for r in rows]}
    )
    ground_truth = pd.DataFrame(
        {
            "pair_id": pair_ids,
            "topic": [r["topic"] for r in rows],
            "dup_cluster": pd.Series([r["dup_cluster"] for r in rows], dtype=object),
            "kind": [r["kind"] for r in rows],
            "motif": [r["motif"] for r in rows],
        }
    )
    notes = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "image_size": image_size,
        "n_pairs": len(rows),
        "n_original": n_original,
        "n_near_duplicate": n_near,
        "n_boilerplate": n_boilerplate,
        "n_near_duplicate_clusters": n_clusters,
        "n_boilerplate_clusters": n_notices,
    }
    return RecipeResult(manifest=manifest, image_root=None, ground_truth=ground_truth, notes=notes)
