"""Open questions: what the user asked and the conversation left unresolved (pure functions).

Found at eviction, per question sentence of a user turn: a sentence ending in
"?" with at least two content words beyond small talk ("how are you today?",
"can you help me with something?" do not count), and not rhetorical ("…,
right?", "who doesn't love …?"). Assistants pad replies ("Great question!",
"Happy to help!", "Anything else?", "Feel free to ask if anything is
unclear!"), so none of that decides anything. A
question is open when

- the reply admits not knowing ("I'm not sure", "I don't have live data",
  "impossible to say this far out", or "let me check" with nothing after
  it), or declines ("I don't take sides", "I can't give legal advice",
  "that's one for your pharmacist") — unless it is a hedge that answers
  all the same: "I can't give an exact figure, but a croissant has about
  250 calories" doubts its precision and answers (two shared terms, or the
  amount or name asked for); "I don't have your gym's hours, but most
  close at 8" lacks the user's own data and is no answer;
- the reply puts it off before saying anything of substance ("let's come
  back to that", "before we get to that", "let's park testing until …",
  "we can brainstorm names later"); "We can plan the museums later!" after
  an answer puts off the next subject, not the question; so does a reply
  that hands it on ("I've escalated this to billing, who will get back to
  you", "we'll text you the moment it's fixed"), where "We'll notify you
  when it lands" after the answer only follows up;
- the reply turns away from it ("speaking of …", "have you considered …",
  "let's talk about …");
- the user dropped it: a later sentence of the same turn, or a message
  the user sent before the reply came, moves on ("Actually, never mind —
  what about hotels?", "Anyway, …") and the reply does not take it up all
  the same;
- the reply answers another question of the same turn (or of such a later
  message) and not this one;
- the reply does not address it but asks something back (a clarifying
  question or an offer, not "anything else?"; "not sure, it depends — how
  old are you?" is one too), and then the user moves on or says goodbye,
  or answers only with an unrelated question, or the session ends, or the
  assistant's next reply still does not address it;
- at session end, nothing replied.

A reply "addresses" a question when they share a content term (stemmed;
filler such as "great", "happy", "help" and short exclamations such as
"Sourdough is such a rewarding hobby!" do not count), or when it holds the
kind of answer asked for: a number or a time for "how long/much/many, when,
what time", a yes/no opening for a yes/no question, a name for
"where/which/who". A reply that does not address a question but shows no
sign of putting it off gets the benefit of the doubt ("What's the weather
like in Reykjavik in March?" — "Expect 0 to 3 °C." shares no term).

A question put off is not open after all when a later turn of the chunk
shares two of its terms: the assistant came back to it, or the user answered
it ("the screen says gate 14 for the Lisbon flight"). Nor is one the user
answers or settles in the same turn or before the reply ("Oh, found it",
"Never mind, I'll call them"). Users often send two messages before the
assistant answers, so the messages between a question and its reply are read
as the rest of the question's turn. A question a trimmed chunk leaves
hanging (no reply, or a question back not answered yet) may still be
answered in the turns the window kept, so only a session end makes it open.

Precision and recall on a labelled set: tests/bench/questions.py. Every
pattern repeats a bounded number of times, and each question looks at most
LOOKAHEAD turns ahead with each turn read once: linear in the chunk's text.

A later user statement that shares enough of the question's terms is taken
as a tentative answer: memstream cannot know it is right, so it says
"tentatively". Maintenance defers a question recall has surfaced often or
that has stayed open long (agents.maintenance.rules.questions.defer): recall stops
surfacing it, but a later answer still resolves it. How many terms count,
and when recall surfaces a question, is services.core.open_questions: the
read service shares that rule and never imports a stage.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import cached_property

from agents.rules.extract import sentences
from schemas import EvictedChunk, MemoryCandidate, MemoryRecord, MemoryType, Provenance, Role, TurnEvent
from schemas.memory import Question, QuestionState
from services.core.open_questions import MIN_SHARED_TERMS, shared_terms
from services.core.terms import entities, related_terms
from services.core.textutil import content_words, stable_id

EXTRACTOR = "questions/v2"
# Turns after a question that may still take it up; a bound so a chunk of many turns stays linear.
LOOKAHEAD = 8
# A statement with at least this many content terms says something ("Let's dig in." does not).
SUBSTANCE_TERMS = 3
# An exclamation of at most this many words is warm-up ("Italy is wonderful in spring!"), not an answer.
SHORT_EXCLAMATION_WORDS = 8

_UNSURE = re.compile(
    r"\b(i (?:don'?t|do not) know|not sure|no idea|i can'?t (?:say|tell)|i cannot (?:say|tell)|unable to"
    r"|(?:i'?ll|let me) (?:find out|get back)|unclear|hard to say"
    r"|no (?:reliable |up-to-date |current |live |recent )?(?:information|data|details)"
    r"|no way (?:of|to) (?:know|tell)(?:ing)?"
    r"|i (?:don'?t|do not) have (?:access|your|(?:[\w-]{1,20} ){0,2}(?:information|data|details|news|figures))"
    r"|(?:can'?t|cannot) (?:predict|confirm|verify)"
    r"|(?:can'?t|cannot) (?:see|access|check) (?:live|real-time|current|your)"
    r"|not (?:certain|positive|100 ?% sure)|(?:can'?t|cannot) be (?:sure|certain)|not able to"
    r"|(?:impossible|too (?:early|soon)) to (?:say|tell|know|predict)"
    r"|(?:can'?t|cannot) give (?:you )?(?:a|an|any) (?:exact |precise |firm |reliable )?(?:figure|number|estimate"
    r"|answer|date|forecast))\b",
    re.IGNORECASE,
)
# The assistant declines to answer: advice it does not give, sides it does not take, a professional's call.
_DECLINE = re.compile(
    r"\b(?:(?:don'?t|do not|won'?t|will not|can'?t|cannot|shouldn'?t) (?:take sides|weigh in|pick (?:a )?sides"
    r"|(?:give|offer|provide|make) (?:\w{1,20} ){0,2}(?:advice|recommendations?|diagnos[ie]s|opinions?|endorsements?)"
    r"|(?:advise|diagnose|endorse) )"
    r"|(?:rather|prefer) not (?:to )?(?:weigh in|comment|say|speculate|take sides)"
    r"|not (?:qualified|in a position|the right (?:person|place)) to"
    r"|i'?m not (?:a|an|your) (?:doctor|lawyer|accountant|vet|therapist|financial (?:adviser|advisor)|pharmacist)"
    r"|(?:one|a question|best|better) (?:for|to ask) (?:a|an|your) (?:\w{1,20} ){0,2}(?:doctor|gp|lawyer|solicitor"
    r"|accountant|vet|pharmacist|therapist|dermatologist|professional|specialist|adviser|advisor))\b",
    re.IGNORECASE,
)
# "Let me check": not knowing only when nothing else in the reply could be what the check found.
_CHECKING = re.compile(r"\b(?:i'?ll|let me|i need to|i'd have to) (?:check|look (?:it|that) up|look into)\b", re.I)
# An offer of more help: "Feel free to ask if anything is unclear!" admits nothing.
_OFFER = re.compile(
    r"^\W{0,3}if\b|\b(?:let me know|feel free|don'?t hesitate|do not hesitate|reach out|just ask)\b", re.I
)
# A hedge: the reply doubts its precision and answers after all ("I can't give an exact figure, but about
# 250 g"). Lacking the user's own data is no hedge: "I don't have your gym's hours, but most close at 8" is open.
_HEDGED = re.compile(r"[,;:\u2014-]\s{0,3}but\s", re.IGNORECASE)
_SOFT_LIMIT = re.compile(r"\b(?:sure|certain|positive|exact|precise|i'?m not (?:a|an))\b", re.IGNORECASE)
# The assistant puts the question off.
_DEFER = re.compile(
    r"\b(?:(?:come|circle|get|go) back to (?:that|this|it|your|the)"
    r"|(?:park|table|shelve) (?:that|this|it)|put a pin in|hold that thought|one thing at a time"
    r"|(?:park|table|shelve|hold off on|pause) [^.!?]{0,30}?\b(?:until|for now|for later|later)"
    r"|set (?:that|this|it) aside|before we (?:get|go|dive|move|jump) (?:to|into|on)"
    r"|(?:revisit|return to) (?:that|this|it)"
    r"|(?:come|circle|get|go) back to [^.!?]{0,40}?\b(?:later|afterwards|shortly|soon|next time|once|when|after|until"
    r"|in a (?:moment|minute|bit|second|sec))"
    r"|(?:we'll|we will|i'll|i will|let's|we can|we could) (?:get to|come to|cover|look at|talk about|discuss|tackle"
    r"|deal with|sort out|go over|look into|brainstorm|work on|think about|plan|pick|choose|figure out)"
    r" [^.!?]{0,40}?\b(?:later|afterwards|after|shortly|soon|next|once|when"
    r"|in a (?:moment|minute|bit|second|sec)))\b",
    re.IGNORECASE,
)
# The answer is to come later, from someone else: support handing the question on ("I've escalated this to
# billing", "they'll get back to you", "we'll let you know once it's fixed"). "We'll email you a
# confirmation" after an answer only confirms it.
_HANDOFF = re.compile(
    r"\b(?:(?:escalated|passed|forwarded|referred|handed) (?:this|it|that|your \w{1,20}) (?:on )?(?:to|with)"
    r"|(?:raised|logged|opened|created|filed|submitted) (?:a|an) (?:\w{1,20} )?(?:ticket|case|request|report"
    r"|investigation)|(?:get|come) back to you|(?:be|get) in touch|follow up with you|call you back"
    r"|(?:contact|call|email|text|message|phone|update|notify|reach out to) you (?:once|when|as soon|the moment|by"
    r"|within|with (?:the|an?) (?:outcome|answer|update|decision))|reach out (?:once|when|as soon)"
    r"|(?:let|keep) you (?:know|posted|updated) (?:once|when|as soon|if|about)"
    r"|(?:they|the team|our team|someone)(?:'ll| will) (?:confirm|decide|explain|advise|look into)"
    r"|(?:looking into|investigating|working on a fix|aware of the (?:issue|problem|fault))"
    r"|depends on (?:the|their|our) (?:\w{1,20} ){0,2}(?:team|department)'?s? (?:decision|review|assessment))\b",
    re.IGNORECASE,
)
# A reply that puts the question off, to later or to someone else.
_PUTS_OFF = (_DEFER, _HANDOFF)
# The assistant turns to something else.
_TURN_AWAY = re.compile(
    r"\b(?:speaking of|by the way|on (?:another|a different|a related) note|have you (?:considered|thought about"
    r"|tried|looked (?:at|into))|let's talk about|instead,? let's|what i can (?:tell|say|do))\b",
    re.IGNORECASE,
)
# A question back that only offers more help, not one the answer waits on.
_FILLER_QUESTION = re.compile(
    r"\b(?:anything else|something else|any (?:other|more) questions|(?:can|may|could) i (?:help|assist|do)"
    r"|how can i help|what else|does (?:that|this) (?:help|make sense)|makes? sense|sound good)\b",
    re.IGNORECASE,
)
# The user gives up on what they just asked ("Actually, never mind — …", "Oh wait, more urgent: …").
_PIVOT = re.compile(
    r"^\W{0,3}(?:(?:actually|ok|okay|hm{1,4}|oh|well|so)\W{1,3}){0,3}(?:never ?mind|forget (?:it|that|about it)"
    r"|scratch that|anyway|anyhow|oh,? wait|on second thought|more (?:urgent|important)(?:ly)?|different question"
    r"|unrelated|change of (?:subject|topic)|let's talk about|instead)\b",
    re.IGNORECASE,
)
_FAREWELL = re.compile(
    r"\b(?:bye|goodbye|gotta go|got to go|i'll think about it|talk (?:to you )?later|that's all)\b", re.IGNORECASE
)
# The user answers their own question, or will see to it themselves ("Never mind, I'll call them.").
_REALISED = re.compile(
    r"\b(?:found it|figured (?:it )?out|worked (?:it )?out|sorted (?:it|that)|got it now|oh right"
    r"|i remember now|now i remember|answered my own question"
    r"|i'll (?:just )?(?:call|ask|check|email|google|look it up|do it|handle it|sort it|figure it))\b",
    re.IGNORECASE,
)
_RHETORICAL = re.compile(
    r",\s{0,3}(?:right|isn't it|aren't they|don't you think|you know|no|eh|huh|correct)\W{0,3}\?$"
    r"|^\W{0,3}(?:who (?:doesn't|does not|wouldn't)|isn't it (?:crazy|funny|amazing|wild|great|sad|weird|strange"
    r"|annoying)|how (?:cool|great|awesome|crazy|cute|amazing|funny|sad) is that|what could (?:possibly )?go wrong"
    r"|guess what|you know what|why not)\b",
    re.IGNORECASE,
)
_OPENER = r"^\W{0,3}(?:(?:and|so|also|but|ok|okay|oh)\W{1,3}){0,2}"
_POLAR = re.compile(
    _OPENER + r"(?:is|are|am|was|were|do|does|did|can|could|should|will|would|has|have|must|may)\b", re.I
)
_YES_NO = re.compile(
    r"^\W{0,3}(?:yes|yeah|yep|yup|no|nope|absolutely|definitely|certainly|not|generally|usually|probably|mostly"
    r"|unfortunately|sadly|only)\b",
    re.IGNORECASE,
)
_HOW_MUCH = re.compile(
    r"\b(?:how (?:much|many|long|far|old|often|early|late|big|soon)|what (?:time|size|age|year|date|price)"
    r"|when|best time)\b",
    re.IGNORECASE,
)
_WHO_WHERE = re.compile(_OPENER + r"(?:where|which|who)\b", re.IGNORECASE)
_AMOUNT = re.compile(
    r"\d|\b(?:two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty|hundred"
    r"|thousand|half|dozen|couple|morning|afternoon|evening|night|noon|midnight|weekend|week|month|year|spring"
    r"|summer|autumn|winter|january|february|march|april|june|july|august|september|october|november"
    r"|december|monday|tuesday|wednesday|thursday|friday|saturday|sunday|tomorrow|tonight|daily)\b",
    re.IGNORECASE,
)
# Not content in a question: contractions and words small talk is made of.
_NOT_CONTENT = frozenset(
    """isn't aren't doesn't don't didn't can't won't i'd you'll i'll we'll you've something anything everything
    someone anyone today day help quick question questions favor favour thing""".split()
)
# Words assistant filler and questions share without being about the same thing.
_FILLER_TERMS = _NOT_CONTENT | frozenset(
    """best better good great happy glad help helps question questions recommend suggest want need make tell please
    sure course absolutely love lovely nice idea ideas tip tips way time ask feel free hope let""".split()
)


def _stem(word: str) -> str:
    """A crude English stem, enough for "hotels"/"hotel", "boiling"/"boil", "cities"/"city"."""
    word = word.removesuffix("'s")
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith("es") and len(word) > 4 and word[-3] in "sxz":
        return word[:-2]
    for suffix in ("ing", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith("ss"):
            return word[: -len(suffix)]
    return word


def terms(text: str) -> frozenset[str]:
    """Stemmed content words that say what a text is about (filler out)."""
    return frozenset(_stem(w) for w in content_words(text) if w not in _FILLER_TERMS)


def is_question(sentence: str) -> bool:
    """A question worth keeping open: content beyond small talk, and not rhetorical."""
    if not sentence.endswith("?") or _RHETORICAL.search(sentence):
        return False
    return len([w for w in content_words(sentence) if w not in _NOT_CONTENT]) >= 2


def _shares(question: frozenset[str], said: frozenset[str], least: int = 1) -> bool:
    return len(question & said) >= min(least, len(question)) if question else False


def _never(sentence: str) -> bool:
    return False


class _Said:
    """One turn, read once: its sentences, what they are about, and the cues in it.

    An assistant's sentences that `padding` names (what the tenant's replies say word for word, such as a
    support desk's "I'm Ava, your virtual assistant.") are not read at all: they neither answer nor say
    anything of substance before a deferral. A user's are: many users asking "How do I reset my password?"
    does not make it padding.
    """

    def __init__(self, turn: TurnEvent, padding: Callable[[str], bool] = _never) -> None:
        self.turn = turn
        said = sentences(turn.content)
        self.sentences = [s for s in said if not padding(s)] if turn.role is Role.ASSISTANT else said
        self.text = turn.content if len(self.sentences) == len(said) else " ".join(self.sentences)
        self.statements = [s for s in self.sentences if not s.endswith("?")]

    @cached_property
    def terms(self) -> frozenset[str]:
        return terms(self.text)

    @cached_property
    def question_terms(self) -> list[frozenset[str]]:
        """What each of the turn's questions is about."""
        return [terms(s) for s in self.sentences if is_question(s)]

    @cached_property
    def statement_terms(self) -> frozenset[str]:
        return terms(" ".join(self.statements))

    @cached_property
    def answering(self) -> list[str]:
        """The statements that could answer: short exclamations and deferring sentences left out, and of a
        sentence that admits a limit only what follows its "but"."""
        kept = []
        for s in self.statements:
            if (s.endswith("!") and len(s.split()) <= SHORT_EXCLAMATION_WORDS) or any(
                p.search(s) for p in (*_PUTS_OFF, _TURN_AWAY, _CHECKING)
            ):
                continue
            limit = _UNSURE.search(s) or _DECLINE.search(s)
            if limit is None:
                kept.append(s)
            elif _SOFT_LIMIT.search(limit.group()) and (hedged := _HEDGED.search(s, limit.end())):
                kept.append(s[hedged.end() :])
        return kept

    @cached_property
    def content(self) -> frozenset[str]:
        return terms(" ".join(self.answering))

    @cached_property
    def names(self) -> frozenset[str]:
        return frozenset(entities(" ".join(self.answering)))

    @cached_property
    def has_amount(self) -> bool:
        return any(_AMOUNT.search(s) for s in self.answering)

    @cached_property
    def says_yes_or_no(self) -> bool:
        return bool(self.sentences) and _YES_NO.search(self.sentences[0]) is not None

    @cached_property
    def unsure(self) -> bool:
        """Admits not knowing, declines to answer, or only promises to check."""
        text = " ".join(s for s in self.sentences if not _OFFER.search(s))
        return (
            _UNSURE.search(text) is not None
            or _DECLINE.search(text) is not None
            or (_CHECKING.search(text) is not None and not self.content)
        )

    @cached_property
    def puts_off(self) -> bool:
        """Admits not knowing, defers, or turns away."""
        return self.unsure or _TURN_AWAY.search(self.text) is not None or self.defers

    @cached_property
    def defers(self) -> bool:
        """Puts something off before it has said anything of substance: "We can plan the museums later!" after
        an answer defers the next subject, not the question."""
        answering = set(self.answering)
        for s in self.sentences:
            if any(p.search(s) for p in _PUTS_OFF):
                return True
            if s in answering and len(terms(s)) >= SUBSTANCE_TERMS:
                return False
        return False

    @cached_property
    def clarifies(self) -> bool:
        """Not knowing yet, and asking what it depends on ("Not sure, it depends on your age. How old are you?")."""
        return self.unsure and self.asks_back and not any(p.search(self.text) for p in (*_PUTS_OFF, _TURN_AWAY))

    @cached_property
    def asks_back(self) -> bool:
        return any(s.endswith("?") and not _FILLER_QUESTION.search(s) for s in self.sentences)

    @cached_property
    def leaves(self) -> bool:
        """A user turn that changes the subject or says goodbye."""
        return (bool(self.sentences) and _PIVOT.search(self.sentences[0]) is not None) or (
            _FAREWELL.search(self.text) is not None
        )

    @cached_property
    def last_pivot(self) -> int:
        """Index of the last sentence that moves on ("Anyway, …"), -1 if none."""
        return max((k for k, s in enumerate(self.sentences) if _PIVOT.search(s)), default=-1)

    @cached_property
    def last_realised(self) -> int:
        """Index of the last statement that answers the user's own question ("Oh, found it"), -1 if none."""
        return max((k for k, s in enumerate(self.sentences) if _realises(s)), default=-1)

    def answers_anyway(self, question: str, asked: frozenset[str]) -> bool:
        """A reply that admits a limit or puts something off but answers in its other statements: shares two
        of the question's terms, or holds the amount or the name asked for."""
        return (
            _shares(asked, self.content, MIN_SHARED_TERMS)
            or (_HOW_MUCH.search(question) is not None and self.has_amount)
            or (_WHO_WHERE.search(question) is not None and len(self.names) > len(self.names & set(entities(question))))
        )

    def addresses(self, question: str, asked: frozenset[str]) -> bool:
        """Whether this reply is about `question` (see the module docstring)."""
        if _shares(asked, self.content):
            return True
        if _HOW_MUCH.search(question) and self.has_amount:
            return True
        if _POLAR.search(question) and self.says_yes_or_no:
            return True
        # A name the question does not hold (counted without copying the reply's names: one question at a time).
        return _WHO_WHERE.search(question) is not None and len(self.names) > len(self.names & set(entities(question)))


def _realises(sentence: str) -> bool:
    return not sentence.endswith("?") and _REALISED.search(sentence) is not None


class _Reading:
    """A chunk's turns, each read at most once, and where the conversation went after a question."""

    def __init__(self, turns: Sequence[TurnEvent], session_ended: bool, padding: Callable[[str], bool]) -> None:
        self.turns = turns
        self.session_ended = session_ended
        self.padding = padding
        self._said: dict[int, _Said] = {}
        self._on_topic: dict[tuple[int, int], bool] = {}

    def said(self, i: int) -> _Said:
        if i not in self._said:
            self._said[i] = _Said(self.turns[i], self.padding)
        return self._said[i]

    def next_turn(self, after: int, role: Role, within: int) -> int | None:
        return next((j for j in range(after + 1, min(within, len(self.turns))) if self.turns[j].role is role), None)

    def taken_up(self, asked: frozenset[str], after: int, within: int) -> bool:
        """Whether a later turn shares enough of the question's terms: the assistant came back to it, or the user
        answered it."""
        for j in range(after + 1, min(within, len(self.turns))):
            said = self.said(j)
            if said.turn.role is Role.USER:
                if _shares(asked, said.statement_terms, MIN_SHARED_TERMS):
                    return True
            elif not said.puts_off and _shares(asked, said.content, MIN_SHARED_TERMS):
                return True
        return False

    def _answers(self, r: int, u: int) -> bool:
        """Whether user turn `u` touches what reply `r` asked; once per pair, however many questions ask."""
        if (r, u) not in self._on_topic:
            self._on_topic[(r, u)] = bool(self.said(r).terms & self.said(u).terms)
        return self._on_topic[(r, u)]

    def before_reply(self, i: int, r: int | None) -> list[_Said]:
        """The user's further messages after turn `i` and before reply `r` (none: as far as LOOKAHEAD reaches)."""
        end = min(len(self.turns), i + 1 + LOOKAHEAD) if r is None else r
        return [self.said(j) for j in range(i + 1, end) if self.turns[j].role is Role.USER]

    def left_open(self, i: int, k: int, question: str, skipped: bool) -> bool:
        """Whether sentence `k` of user turn `i`, `question`, is left open by the chunk.

        `skipped`: the reply addressed another question of the turn (or of a message before the reply), not this one.
        """
        asker = self.said(i)
        asked = terms(question)
        within = i + 1 + LOOKAHEAD
        r = self.next_turn(i, Role.ASSISTANT, within)
        more = self.before_reply(i, r)
        if asker.last_realised > k or any(m.last_realised >= 0 for m in more):
            return False
        if r is None:
            return self.session_ended and not self.taken_up(asked, i, within)
        reply = self.said(r)
        if asker.last_pivot > k or any(m.last_pivot >= 0 for m in more):
            return not _shares(asked, reply.content, MIN_SHARED_TERMS)
        if (reply.puts_off and not reply.clarifies and not reply.answers_anyway(question, asked)) or skipped:
            return not self.taken_up(asked, r, within)
        if not reply.clarifies and (reply.addresses(question, asked) or not reply.asks_back):
            return False
        left = self._left_after_asking_back(r, question, asked, within)
        return left and not self.taken_up(asked, r, within)

    def _left_after_asking_back(self, r: int, question: str, asked: frozenset[str], within: int) -> bool:
        """The reply `r` asked the user something back: was the question then left?

        Yes if the user moved on or said goodbye, or answered only with a new question
        that touches neither, or if the next reply still does not address it; undecided
        (no) in a trimmed chunk that ends before the user or the assistant answered.
        """
        u = self.next_turn(r, Role.USER, within)
        if u is None:
            return self.session_ended
        answer = self.said(u)
        if answer.leaves or (not answer.statements and not _shares(asked, answer.terms) and not self._answers(r, u)):
            return True
        r2 = self.next_turn(u, Role.ASSISTANT, within)
        if r2 is None:
            return self.session_ended
        final = self.said(r2)
        # A reply that builds on what the user told it (not on a new question of theirs) answers the
        # question it had asked back about: "Help me plan Japan?" "When?" "April." "April is blossom season: …"
        builds_on = answer.statements == answer.sentences and _shares(answer.terms, final.content)
        return final.puts_off or not (builds_on or final.addresses(question, asked))


def unresolved(
    turns: Sequence[TurnEvent], *, session_ended: bool, padding: Callable[[str], bool] = _never
) -> list[tuple[TurnEvent, str]]:
    """(user turn, question sentence) for each question the chunk leaves open, in order (`padding`: see _Said)."""
    reading = _Reading(turns, session_ended, padding)
    found: list[tuple[TurnEvent, str]] = []
    for i, turn in enumerate(turns):
        if turn.role is not Role.USER:
            continue
        asker = reading.said(i)
        asked = [(k, s) for k, s in enumerate(asker.sentences) if is_question(s)]
        if not asked:
            continue
        r = reading.next_turn(i, Role.ASSISTANT, i + 1 + LOOKAHEAD)
        reply = reading.said(r) if r is not None else None
        # Which of the turn's questions the reply took up, by shared terms only: a number or a name in
        # the reply may answer any of them. One the user moved on from ("…? Anyway, …") is owed nothing.
        addressed = {
            k for k, q in asked if reply is not None and k >= asker.last_pivot and _shares(terms(q), reply.content)
        }
        # A question the user sent next, before the reply, that the reply took up instead.
        later = reply is not None and any(
            _shares(q, reply.content) for m in reading.before_reply(i, r) for q in m.question_terms
        )
        for k, question in asked:
            skipped = k >= asker.last_pivot and k not in addressed and (bool(addressed) or later)
            if reading.left_open(i, k, question, skipped):
                found.append((turn, question))
    return found


# The longest sentence that leads a question into its memory.
MAX_LEAD_WORDS = 30


def with_lead(said: Sequence[str], at: int) -> str:
    """The question `said[at]` with the user's sentence before it, when that one says what it is about.

    "What's the best library?" alone does not say for what; "Next I want to
    add rate limiting to /login. What's the best library?" does, to a reader
    and to a later answer or query (its related terms). A greeting, a thanks
    (fewer than two content words), another question or a long paste lead
    nothing in.
    """
    question = said[at]
    lead = said[at - 1] if at > 0 else ""
    if not lead or lead.endswith("?") or len(content_words(lead)) < 2 or len(lead.split()) > MAX_LEAD_WORDS:
        return question
    return f"{lead} {question}"


def _led(found: Sequence[tuple[TurnEvent, str]]) -> list[tuple[TurnEvent, str]]:
    """Each question with its lead-in (`with_lead`); each turn split once, so a turn of many questions stays linear."""
    split: dict[str, tuple[list[str], dict[str, int]]] = {}
    out = []
    for turn, question in found:
        if turn.event_id not in split:
            said = sentences(turn.content)
            split[turn.event_id] = (said, {s: k for k, s in reversed(list(enumerate(said)))})
        said, first = split[turn.event_id]
        out.append((turn, with_lead(said, first[question]) if question in first else question))
    return out


def question_candidates(chunk: EvictedChunk, padding: Callable[[str], bool] = _never) -> list[MemoryCandidate]:
    """The chunk's open questions as memories; `padding` names the assistant sentences that say nothing (_Said)."""
    return [
        MemoryCandidate(
            candidate_id=stable_id(chunk.tenant_id, chunk.user_id, MemoryType.QUESTION.value, turn.event_id, text),
            tenant_id=chunk.tenant_id,
            user_id=chunk.user_id,
            type=MemoryType.QUESTION,
            text=text,
            importance=0.5,
            confidence=0.6,
            observed_at=turn.ts,
            entities=entities(text),
            source=Provenance(session_id=chunk.session_id, event_ids=[turn.event_id], metadata=[turn.metadata]),
            extractor=EXTRACTOR,
            question=Question(related=related_terms(text)),
        )
        for turn, text in _led(unresolved(chunk.turns, session_ended=chunk.reason == "session_end", padding=padding))
    ]


AWAITING_ANSWER = frozenset({QuestionState.OPEN, QuestionState.DEFERRED})


def answers(question: MemoryRecord, statement: MemoryCandidate) -> bool:
    """Whether a later user statement (not itself a question) plausibly answers an open or deferred `question`."""
    if question.question is None or question.question.state not in AWAITING_ANSWER:
        return False
    if statement.observed_at <= question.observed_at or statement.text.rstrip().endswith("?"):
        return False
    return len(shared_terms(question, related_terms(statement.text))) >= MIN_SHARED_TERMS
