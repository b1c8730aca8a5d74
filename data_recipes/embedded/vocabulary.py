"""The embedded dataset's word lists and sentence templates: data, kept as prose so the tables stay readable.

Nothing here draws from a generator; :mod:`data_recipes.embedded.text` fills the templates and
:mod:`data_recipes.embedded.recipe` pairs the topics with motifs. ``TOPIC_MOTIFS`` sits here with the topics
because it is part of each topic's design (which pictures illustrate it), not of the drawing.
"""

from __future__ import annotations


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

#: topic -> topics whose words leak into its texts (news stories touch neighboring issues).
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
