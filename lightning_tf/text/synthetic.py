"""Generated parallel corpora that need no download: English -> German, and copy / reverse / sort.

The English -> German grammar is small (28 nouns, 12 adjectives, 20 verbs, pronouns, numbers, dates;
about 450 English and 600 German word forms) but it makes a model learn what real translation needs,
each case rendered deterministically so the task has a single right answer in either direction:

* word order: German verb-second after a fronted adverb ("Today the man buys a car." ->
  "Heute kauft der Mann ein Auto."), the time adverb moved into the middle field ("The man buys a
  car today." -> "Der Mann kauft heute ein Auto."), the participle or infinitive at the end of the
  clause ("has bought the car" -> "hat das Auto gekauft"), verb-final subordinate clauses ("that the
  man buys the car" -> "dass der Mann das Auto kauft"), "nicht" after the object, verb-first questions;
* relative clauses on the subject, verb last and the pronoun agreeing in gender and number: "The
  woman who buys a car sees the dog." -> "Die Frau, die ein Auto kauft, sieht den Hund.";
* separable verbs: "The man calls his friend." -> "Der Mann ruft seinen Freund an." but "..., dass der
  Mann seinen Freund anruft" and "hat ... angerufen";
* morphology: gender, case (nominative / accusative / dative after "mit" and after verbs such as
  "helfen": "hilft dem Mann") and adjective declension after definite, indefinite and possessive
  articles or none, weak nouns ("den Jungen"), plurals with umlaut ("Äpfel"), dative plural "-n",
  irregular present tense ("sieht", "trägt", "lädt ... ein"), "kein-" for a negated indefinite;
* numbers and dates written out: "twenty-one" -> "einundzwanzig" (units before tens), "on the 3rd of
  May" and "on May 3rd" -> "am dritten Mai".

Sentences have at most ``max_words`` English words (15 by default). Everything comes from one
``random.Random(seed)``, so a seed gives the same corpus on every machine.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "SyntheticName",
    "algorithmic_pairs",
    "english_german_pairs",
    "german_cardinal",
    "german_ordinal_dative",
    "english_cardinal",
    "english_ordinal",
    "synthetic_pairs",
]

SyntheticName = Literal["synthetic", "copy", "reverse", "sort"]

# ----------------------------------------------------------------------------------------------
# numbers and dates

_EN_UNITS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
_DE_UNITS = [
    "null",
    "eins",
    "zwei",
    "drei",
    "vier",
    "fünf",
    "sechs",
    "sieben",
    "acht",
    "neun",
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
_DE_TENS = ["", "", "zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"]
_DE_ORD = [
    "",
    "erst",
    "zweit",
    "dritt",
    "viert",
    "fünft",
    "sechst",
    "siebt",
    "acht",
    "neunt",
    "zehnt",
    "elft",
    "zwölft",
    "dreizehnt",
    "vierzehnt",
    "fünfzehnt",
    "sechzehnt",
    "siebzehnt",
    "achtzehnt",
    "neunzehnt",
]
_EN_MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
_DE_MONTHS = [
    "Januar",
    "Februar",
    "März",
    "April",
    "Mai",
    "Juni",
    "Juli",
    "August",
    "September",
    "Oktober",
    "November",
    "Dezember",
]
_EN_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_DE_DAYS = ["Montag", "Dienstag", "Mittwoch", "Donnerstag", "Freitag", "Samstag", "Sonntag"]


def english_cardinal(n: int) -> str:
    """0..99 in words: ``21 -> "twenty-one"``."""
    if not 0 <= n < 100:
        raise ValueError(f"n ({n}) must be in 0..99")
    if n < 20:
        return _EN_UNITS[n]
    tens, units = divmod(n, 10)
    return _EN_TENS[tens] + (f"-{_EN_UNITS[units]}" if units else "")


def german_cardinal(n: int) -> str:
    """0..99 in words, units before tens: ``21 -> "einundzwanzig"``."""
    if not 0 <= n < 100:
        raise ValueError(f"n ({n}) must be in 0..99")
    if n < 20:
        return _DE_UNITS[n]
    tens, units = divmod(n, 10)
    if not units:
        return _DE_TENS[tens]
    return ("ein" if units == 1 else _DE_UNITS[units]) + "und" + _DE_TENS[tens]


def english_ordinal(n: int) -> str:
    """1..99 as digits with suffix: ``1 -> "1st"``, ``12 -> "12th"``, ``23 -> "23rd"``."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def german_ordinal_dative(n: int) -> str:
    """1..99 as the dative ordinal after "am": ``3 -> "dritten"``, ``21 -> "einundzwanzigsten"``."""
    if not 1 <= n < 100:
        raise ValueError(f"n ({n}) must be in 1..99")
    return (_DE_ORD[n] if n < 20 else german_cardinal(n) + "st") + "en"


# ----------------------------------------------------------------------------------------------
# lexicon


@dataclass(frozen=True)
class Noun:
    en: str
    en_pl: str
    de: str
    de_pl: str
    gender: Literal["m", "f", "n"]
    weak: bool = False  # n-declension: "der Junge", "den Jungen"

    def de_form(self, case: str, plural: bool) -> str:
        if plural:
            # dative plural adds -n unless the plural already ends in -n or -s
            return self.de_pl + ("n" if case == "dat" and self.de_pl[-1] not in "ns" else "")
        if self.weak and case != "nom":
            return self.de + ("n" if self.de.endswith("e") else "en")
        return self.de


def _n(en: str, en_pl: str, de: str, de_pl: str, gender: Literal["m", "f", "n"], weak: bool = False) -> Noun:
    return Noun(en, en_pl, de, de_pl, gender, weak)


ANIMATE = [
    _n("man", "men", "Mann", "Männer", "m"),
    _n("boy", "boys", "Junge", "Jungen", "m", weak=True),
    _n("student", "students", "Student", "Studenten", "m", weak=True),
    _n("friend", "friends", "Freund", "Freunde", "m"),
    _n("teacher", "teachers", "Lehrer", "Lehrer", "m"),
    _n("doctor", "doctors", "Arzt", "Ärzte", "m"),
    _n("dog", "dogs", "Hund", "Hunde", "m"),
    _n("woman", "women", "Frau", "Frauen", "f"),
    _n("cat", "cats", "Katze", "Katzen", "f"),
    _n("girl", "girls", "Mädchen", "Mädchen", "n"),
    _n("child", "children", "Kind", "Kinder", "n"),
]
THINGS = [
    _n("apple", "apples", "Apfel", "Äpfel", "m"),
    _n("table", "tables", "Tisch", "Tische", "m"),
    _n("key", "keys", "Schlüssel", "Schlüssel", "m"),
    _n("letter", "letters", "Brief", "Briefe", "m"),
    _n("chair", "chairs", "Stuhl", "Stühle", "m"),
    _n("ball", "balls", "Ball", "Bälle", "m"),
    _n("flower", "flowers", "Blume", "Blumen", "f"),
    _n("lamp", "lamps", "Lampe", "Lampen", "f"),
    _n("bottle", "bottles", "Flasche", "Flaschen", "f"),
    _n("bag", "bags", "Tasche", "Taschen", "f"),
    _n("cup", "cups", "Tasse", "Tassen", "f"),
    _n("book", "books", "Buch", "Bücher", "n"),
    _n("car", "cars", "Auto", "Autos", "n"),
    _n("house", "houses", "Haus", "Häuser", "n"),
    _n("picture", "pictures", "Bild", "Bilder", "n"),
    _n("glass", "glasses", "Glas", "Gläser", "n"),
    _n("bicycle", "bicycles", "Fahrrad", "Fahrräder", "n"),
]
ADJECTIVES = [
    ("small", "klein"),
    ("big", "groß"),
    ("red", "rot"),
    ("old", "alt"),
    ("new", "neu"),
    ("beautiful", "schön"),
    ("green", "grün"),
    ("blue", "blau"),
    ("black", "schwarz"),
    ("white", "weiß"),
    ("young", "jung"),
    ("cheap", "billig"),
]
ANIMATE_ADJECTIVES = [a for a in ADJECTIVES if a[0] in ("small", "big", "old", "young", "beautiful")]


@dataclass(frozen=True)
class Verb:
    en: str
    en_3sg: str
    en_part: str
    en_past: str
    de_inf: str
    de_1sg: str
    de_3sg: str
    de_part: str
    particle: str = ""  # separable prefix: "ruft ... an", "dass ... anruft"
    de_pl: str = ""  # plural finite form when it differs from the infinitive ("rufen" for "anrufen")
    case: Literal["acc", "dat"] = "acc"  # case of the object: "hilft dem Mann"
    animate: bool = False  # takes a person or an animal as object

    def de_finite(self, person: str) -> str:
        return {"1sg": self.de_1sg, "3sg": self.de_3sg}.get(person, self.de_pl or self.de_inf)

    def en_finite(self, person: str) -> str:
        return self.en_3sg if person == "3sg" else self.en


VERBS = [
    Verb("see", "sees", "seen", "saw", "sehen", "sehe", "sieht", "gesehen"),
    Verb("buy", "buys", "bought", "bought", "kaufen", "kaufe", "kauft", "gekauft"),
    Verb("find", "finds", "found", "found", "finden", "finde", "findet", "gefunden"),
    Verb("need", "needs", "needed", "needed", "brauchen", "brauche", "braucht", "gebraucht"),
    Verb("sell", "sells", "sold", "sold", "verkaufen", "verkaufe", "verkauft", "verkauft"),
    Verb("carry", "carries", "carried", "carried", "tragen", "trage", "trägt", "getragen"),
    Verb("paint", "paints", "painted", "painted", "malen", "male", "malt", "gemalt"),
    Verb("take", "takes", "taken", "took", "nehmen", "nehme", "nimmt", "genommen"),
    Verb("love", "loves", "loved", "loved", "lieben", "liebe", "liebt", "geliebt"),
    Verb("wash", "washes", "washed", "washed", "waschen", "wasche", "wäscht", "gewaschen"),
    Verb("visit", "visits", "visited", "visited", "besuchen", "besuche", "besucht", "besucht"),
    Verb("hold", "holds", "held", "held", "halten", "halte", "hält", "gehalten"),
    Verb("forget", "forgets", "forgotten", "forgot", "vergessen", "vergesse", "vergisst", "vergessen"),
    # separable verbs: the particle waits at the end of a main clause
    Verb("call", "calls", "called", "called", "anrufen", "rufe", "ruft", "angerufen", "an", "rufen", animate=True),
    Verb(
        "invite",
        "invites",
        "invited",
        "invited",
        "einladen",
        "lade",
        "lädt",
        "eingeladen",
        "ein",
        "laden",
        animate=True,
    ),
    Verb("pick up", "picks up", "picked up", "picked up", "abholen", "hole", "holt", "abgeholt", "ab", "holen"),
    Verb(
        "bring along",
        "brings along",
        "brought along",
        "brought along",
        "mitbringen",
        "bringe",
        "bringt",
        "mitgebracht",
        "mit",
        "bringen",
    ),
    # verbs with a dative object
    Verb("help", "helps", "helped", "helped", "helfen", "helfe", "hilft", "geholfen", case="dat", animate=True),
    Verb("thank", "thanks", "thanked", "thanked", "danken", "danke", "dankt", "gedankt", case="dat", animate=True),
    Verb(
        "answer",
        "answers",
        "answered",
        "answered",
        "antworten",
        "antworte",
        "antwortet",
        "geantwortet",
        case="dat",
        animate=True,
    ),
]
HAVE = Verb("have", "has", "had", "had", "haben", "habe", "hat", "gehabt")
# English modal, then German 1sg/3sg and plural forms
MODALS = [
    ("wants to", "want to", "will", "wollen"),
    ("can", "can", "kann", "können"),
    ("must", "must", "muss", "müssen"),
]
PRONOUNS = [("I", "ich", "1sg"), ("he", "er", "3sg"), ("she", "sie", "3sg"), ("we", "wir", "pl"), ("they", "sie", "pl")]
MATRIX = [  # English, German (verb-second main clause introducing "dass" / "weil")
    ("I think that", "ich glaube, dass"),
    ("he says that", "er sagt, dass"),
    ("she knows that", "sie weiß, dass"),
    ("we hope that", "wir hoffen, dass"),
    ("they say that", "sie sagen, dass"),
    ("I am happy because", "ich bin froh, weil"),
    ("she is sad because", "sie ist traurig, weil"),
]

# German article endings: definite by case and gender/plural, ein-words ("ein", "mein", "kein") likewise
_DEF = {
    "nom": {"m": "der", "f": "die", "n": "das", "pl": "die"},
    "acc": {"m": "den", "f": "die", "n": "das", "pl": "die"},
    "dat": {"m": "dem", "f": "der", "n": "dem", "pl": "den"},
}
_EIN = {
    "nom": {"m": "", "f": "e", "n": "", "pl": "e"},
    "acc": {"m": "en", "f": "e", "n": "", "pl": "e"},
    "dat": {"m": "em", "f": "er", "n": "em", "pl": "en"},
}
# adjective endings: weak (after der-words), mixed (after ein-words), strong (no article)
_WEAK = {
    "nom": {"m": "e", "f": "e", "n": "e", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "e", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_MIXED = {
    "nom": {"m": "er", "f": "e", "n": "es", "pl": "en"},
    "acc": {"m": "en", "f": "e", "n": "es", "pl": "en"},
    "dat": {"m": "en", "f": "en", "n": "en", "pl": "en"},
}
_STRONG_PL = {"nom": "e", "acc": "e", "dat": "en"}
_POSSESSIVES = [("my", "mein"), ("his", "sein"), ("her", "ihr")]


@dataclass
class NP:
    """A noun phrase in both languages; ``kind`` says which article it took."""

    en: str
    de: str
    plural: bool
    kind: Literal["def", "indef", "poss", "num"]
    gender: Literal["m", "f", "n", "pl"]


def _noun_phrase(rng: random.Random, pool: list[Noun], case: str, negate_indef: bool = False) -> NP:
    noun = rng.choice(pool)
    kind = rng.choices(["def", "indef", "poss", "num"], weights=[4, 3, 2, 1])[0]
    plural = kind == "num" or (kind in ("def", "poss") and rng.random() < 0.3)
    g = "pl" if plural else noun.gender
    adj = rng.choice(ANIMATE_ADJECTIVES if noun in ANIMATE else ADJECTIVES) if rng.random() < 0.4 else None
    en_noun, de_noun = (noun.en_pl if plural else noun.en), noun.de_form(case, plural)
    if kind == "def":
        en_det, de_det, endings = "the", _DEF[case][g], _WEAK
    elif kind == "indef":
        first = adj[0] if adj else en_noun
        en_det = "an" if first[0] in "aeiou" else "a"
        de_det, endings = ("kein" if negate_indef else "ein") + _EIN[case][g], _MIXED
    elif kind == "poss":
        en_det, de_stem = rng.choice(_POSSESSIVES)
        de_det, endings = de_stem + _EIN[case][g], _MIXED
    else:
        count = rng.randint(2, 99)
        en_det, de_det = english_cardinal(count), german_cardinal(count)
        endings = None
    en = " ".join([en_det, *([adj[0]] if adj else []), en_noun])
    if adj:
        ending = _STRONG_PL[case] if endings is None else endings[case][g]
        de = f"{de_det} {adj[1]}{ending} {de_noun}"
    else:
        de = f"{de_det} {de_noun}"
    return NP(en, de, plural, kind, g)


def _time_adverb(rng: random.Random, past: bool) -> tuple[str, str]:
    roll = rng.random()
    if roll < 0.35:
        day, month = rng.randint(1, 28 if rng.random() < 0.5 else 31), rng.randrange(12)
        de = f"am {german_ordinal_dative(day)} {_DE_MONTHS[month]}"
        if rng.random() < 0.5:
            return f"on the {english_ordinal(day)} of {_EN_MONTHS[month]}", de
        return f"on {_EN_MONTHS[month]} {english_ordinal(day)}", de
    if roll < 0.55:
        d = rng.randrange(7)
        return f"on {_EN_DAYS[d]}", f"am {_DE_DAYS[d]}"
    if roll < 0.7:
        m = rng.randrange(12)
        return f"in {_EN_MONTHS[m]}", f"im {_DE_MONTHS[m]}"
    words = (
        [("yesterday", "gestern"), ("last week", "letzte Woche")]
        if past
        else [("today", "heute"), ("tomorrow", "morgen"), ("every day", "jeden Tag")]
    )
    return rng.choice(words)


@dataclass
class Clause:
    """A clause in both languages, German kept in topological fields to place the verb."""

    en_subject: str
    en_predicate: str  # everything after the subject
    en_question: tuple[str, str]  # (auxiliary, rest) for "Does the man see ...?"
    de_subject: str
    de_finite: str
    de_middle: list[str]
    de_final: list[str]
    de_particle: str = ""

    def _bracket(self) -> list[str]:
        return [*self.de_middle, *self.de_final, *([self.de_particle] if self.de_particle else [])]

    def de_main(self, front: str | None = None) -> list[str]:
        """Verb second: subject (or the fronted adverb, then the subject) before the finite verb."""
        if front is None:
            return [self.de_subject, self.de_finite, *self._bracket()]
        return [front, self.de_finite, self.de_subject, *self._bracket()]

    def de_subordinate(self) -> list[str]:
        """Verb last: the finite verb follows the participle or infinitive and takes its particle back."""
        return [self.de_subject, *self.de_middle, *self.de_final, self.de_particle + self.de_finite]

    def de_question(self) -> list[str]:
        """Verb first."""
        return [self.de_finite, self.de_subject, *self._bracket()]


Form = Literal["present", "perfect", "modal", "negated"]


_RELATIVE = {"m": "der", "f": "die", "n": "das", "pl": "die"}


def _relative_clause(rng: random.Random, np: NP) -> tuple[str, str]:
    """ "who buys a car" -> ", der ein Auto kauft,": the pronoun agrees with the noun, the verb goes last."""
    verb = rng.choice([v for v in VERBS if not v.animate])
    person = "pl" if np.plural else "3sg"
    obj = _noun_phrase(rng, THINGS, "acc")
    return (
        f"who {verb.en_finite(person)} {obj.en}",
        f", {_RELATIVE[np.gender]} {obj.de} {verb.particle}{verb.de_finite(person)},",
    )


def _clause(rng: random.Random, form: Form, adverb: tuple[str, str] | None, adverb_in_middle: bool) -> Clause:
    if rng.random() < 0.35:
        en_subj, de_subj, person = rng.choice(PRONOUNS)
    else:
        np = _noun_phrase(rng, ANIMATE, "nom")
        en_subj, de_subj, person = np.en, np.de, "pl" if np.plural else "3sg"
        if rng.random() < 0.15:
            en_rel, de_rel = _relative_clause(rng, np)
            en_subj, de_subj = f"{en_subj} {en_rel}", de_subj + de_rel
    verb = rng.choice(VERBS)
    negated = form == "negated"
    pool = ANIMATE if verb.animate else ANIMATE + THINGS
    obj = _noun_phrase(rng, pool, verb.case, negate_indef=negated)
    while negated and obj.kind == "num":  # "sieht nicht drei Hunde" is marked German; keep it out
        obj = _noun_phrase(rng, pool, verb.case, negate_indef=True)
    pp = _noun_phrase(rng, ANIMATE, "dat") if not negated and rng.random() < 0.2 else None

    en_obj = [obj.en] + ([f"with {pp.en}"] if pp else [])
    middle = [obj.de] + ([f"mit {pp.de}"] if pp else [])
    if negated and obj.kind != "indef":
        middle.append("nicht")  # "nicht" follows a definite object; an indefinite one takes "kein-"
    if adverb and adverb_in_middle:
        middle.insert(0, adverb[1])  # German puts time before the object, English puts it last
    final: list[str] = []
    particle = verb.particle if form in ("present", "negated") else ""  # a participle or infinitive keeps it
    if form == "present":
        en_pred, de_fin = [verb.en_finite(person), *en_obj], verb.de_finite(person)
        q = ("does" if person == "3sg" else "do", " ".join([verb.en, *en_obj]))
    elif form == "perfect":
        de_fin, final = HAVE.de_finite(person), [verb.de_part]
        if adverb:  # English says "bought ... yesterday" where German keeps the perfect
            en_pred, q = [verb.en_past, *en_obj], ("did", " ".join([verb.en, *en_obj]))
        else:
            aux = HAVE.en_finite(person)
            en_pred, q = [aux, verb.en_part, *en_obj], (aux, " ".join([verb.en_part, *en_obj]))
    elif form == "modal":
        en_sg, en_pl, de_sg, de_pl = rng.choice(MODALS)
        en_mod = en_sg if person == "3sg" else en_pl
        en_pred, de_fin, final = [en_mod, verb.en, *en_obj], de_pl if person == "pl" else de_sg, [verb.de_inf]
        q = (en_mod.split()[0], " ".join([*en_mod.split()[1:], verb.en, *en_obj]))
        if en_mod.startswith("want"):  # "Does he want to buy ...?"
            q = ("does" if person == "3sg" else "do", " ".join(["want to", verb.en, *en_obj]))
    else:
        aux = "does not" if person == "3sg" else "do not"
        en_pred, de_fin = [aux, verb.en, *en_obj], verb.de_finite(person)
        q = ("does" if person == "3sg" else "do", " ".join(["not", verb.en, *en_obj]))
    if adverb and adverb_in_middle:
        en_pred.append(adverb[0])
        q = (q[0], f"{q[1]} {adverb[0]}")
    return Clause(en_subj, " ".join(en_pred), q, de_subj, de_fin, middle, final, particle)


def _sentence(rng: random.Random) -> tuple[str, str]:
    kind = rng.choices(["main", "fronted", "subordinate", "question"], weights=[4, 2, 3, 1])[0]
    form = rng.choices(["present", "perfect", "modal", "negated"], weights=[4, 3, 2, 2])[0]
    adverb = _time_adverb(rng, past=form == "perfect") if kind == "fronted" or rng.random() < 0.3 else None
    clause = _clause(rng, form, adverb, adverb_in_middle=kind != "fronted")
    if kind == "fronted":
        assert adverb is not None
        en = f"{adverb[0]} {clause.en_subject} {clause.en_predicate}."
        de = " ".join(clause.de_main(front=adverb[1])) + "."
    elif kind == "subordinate":
        en_m, de_m = rng.choice(MATRIX)
        en = f"{en_m} {clause.en_subject} {clause.en_predicate}."
        de = f"{de_m} " + " ".join(clause.de_subordinate()) + "."
    elif kind == "question":
        aux, rest = clause.en_question
        en = f"{aux} {clause.en_subject} {rest}?"
        de = " ".join(clause.de_question()) + "?"
    else:
        en = f"{clause.en_subject} {clause.en_predicate}."
        de = " ".join(clause.de_main()) + "."
    return en[0].upper() + en[1:], de[0].upper() + de[1:]


def english_german_pairs(n: int, seed: int, max_words: int = 15) -> list[tuple[str, str]]:
    """``n`` distinct (English, German) sentence pairs from the grammar above.

    Args:
        n: pairs to return.
        seed: seed of the generator; the same seed gives the same pairs in the same order.
        max_words: longest English sentence in words; longer draws are discarded.
    """
    if n < 0:
        raise ValueError(f"n ({n}) must be >= 0")
    if max_words < 5:
        raise ValueError(f"max_words ({max_words}) must be at least 5")
    rng = random.Random(seed)
    seen: set[tuple[str, str]] = set()
    pairs: list[tuple[str, str]] = []
    attempts = 0
    while len(pairs) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"could not draw {n} distinct pairs of at most {max_words} words")
        pair = _sentence(rng)
        if len(pair[0].split()) <= max_words and pair not in seen:
            seen.add(pair)
            pairs.append(pair)
    return pairs


ALPHABET = "abcdefghijklmnopqrst"


def algorithmic_pairs(
    task: Literal["copy", "reverse", "sort"], n: int, seed: int, min_words: int = 2, max_words: int = 10
) -> list[tuple[str, str]]:
    """``n`` pairs of random letter sequences ("c f a b") and their copy, reversal or sorted order.

    Args:
        task: ``copy``, ``reverse`` or ``sort``.
        n: pairs to return (repeats possible).
        seed: seed of the generator.
        min_words: fewest letters in a sequence.
        max_words: most letters in a sequence.
    """
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words ({min_words}) <= max_words ({max_words})")
    transform = {"copy": lambda w: w, "reverse": lambda w: w[::-1], "sort": sorted}.get(task)
    if transform is None:
        raise ValueError(f"task must be 'copy', 'reverse' or 'sort', got {task!r}")
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = rng.choices(ALPHABET, k=rng.randint(min_words, max_words))
        pairs.append((" ".join(words), " ".join(transform(words))))
    return pairs


def synthetic_pairs(
    name: SyntheticName, n: int, seed: int, min_words: int = 2, max_words: int = 10
) -> list[tuple[str, str]]:
    """Pairs of the built-in corpus ``name``: ``synthetic`` (English -> German; ``min_words`` and ``max_words``
    do not apply) or an algorithmic task (``copy``, ``reverse``, ``sort``) of ``min_words``..``max_words`` letters."""
    if name == "synthetic":
        return english_german_pairs(n, seed)
    return algorithmic_pairs(name, n, seed, min_words, max_words)
