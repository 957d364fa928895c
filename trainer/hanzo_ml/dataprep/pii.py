"""PII masking, the `rules` tier of the `mask_pii` operation: patterns plus checksums, no model.

Each match becomes `[REDACTED:<kind>]`. Spec 000 writes a bare `[REDACTED]`; the kind in the marker is a deliberate
addition, so that a reader of the prepared data (and the counts on the version) can tell an email from a key.

What this tier does not find: names, street addresses, dates of birth and free-form identifiers (those need an NER
tier). Numbers are masked only when they pass their checksum or issuing rules (Luhn for cards, mod 97 for IBANs,
the SSA's area/group/serial rules for SSNs, libphonenumber's numbering plans for phones), so an order id or a
number that fails its checksum stays.

Speed: every kind has a cheap prefilter (no '@' -> no email or URL credentials, no digit -> no number, fewer than
two ':' -> no IPv6), so clean text costs a few substring tests. Validators come from maintained packages where
they exist (python-stdnum, phonenumbers, ipaddress). phonenumbers' PhoneNumberMatcher scans every text itself and
costs about 3.5 times what a regex for phone-shaped candidates plus phonenumbers' validation of those costs
(bench/data/pii_speed.py, bench/results/data.md), so the masker does the latter. The IPv4 version-string rule and the
secret entropy rule are our own: no maintained package decides either.
"""
from __future__ import annotations

import ipaddress
import math
import re
from collections import Counter
from typing import Callable, Iterable

import phonenumbers
from stdnum import iban as stdnum_iban
from stdnum import luhn
from stdnum.us import ssn as stdnum_ssn

PII_KINDS = ("email", "phone", "credit_card", "iban", "us_ssn", "ipv4", "ipv6", "secret", "url_credentials")

# Applied in this order: a secret or a URL's credentials would otherwise be cut up by the email, phone and IP
# patterns, and cards, IBANs, SSNs and IPs are digit runs the phone pattern would also accept.
_ORDER = ("secret", "url_credentials", "email", "iban", "credit_card", "us_ssn", "ipv6", "ipv4", "phone")


def marker(kind: str) -> str:
    return f"[REDACTED:{kind}]"


# ---- secrets ------------------------------------------------------------------------------------------------

_KNOWN_SECRETS = re.compile(
    r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----[\s\S]*?-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"                              # AWS access key id
    r"|\bgh[pousr]_[A-Za-z0-9]{36}\b|\bgithub_pat_[A-Za-z0-9_]{22,255}\b"  # GitHub tokens
    r"|\bxox[abposr]-[A-Za-z0-9-]{10,}"                             # Slack
    r"|\b(?:sk|rk)_live_[A-Za-z0-9]{20,}\b"                         # Stripe live keys
    r"|\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"                      # OpenAI / Anthropic style keys
    r"|\bAIza[0-9A-Za-z_-]{35}"                                     # Google API key
    r"|\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}"  # JWT (header and payload are JSON)
)
# Prefilter: one regex search (a C loop) instead of a Python loop of substring tests.
_SECRET_HINT = re.compile(r"PRIVATE KEY|AKIA|ASIA|gh[pousr]_|github_pat_|xox|_live_|sk-|AIza|eyJ")

# A value assigned to a word that names a secret; masked only when it looks random (see _looks_random).
_KEYWORD_VALUE = re.compile(
    r"(?i)\b(?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?key|token|auth[_-]?token|password|passwd|pwd|credentials?)"
    r"""["']?\s*(?:[:=]|\bis\b)\s*["']?([A-Za-z0-9+/_.~!@#$%^&*-]{12,})"""
)


def _names_a_secret(text: str) -> bool:
    """Substring tests on the lower-cased text: cheaper than a case-insensitive regex search."""
    low = text.lower()
    return "key" in low or "secret" in low or "token" in low or "pass" in low or "pwd" in low or "credential" in low


def _looks_random(value: str) -> bool:
    """A token of mixed letters and digits with >= 3.5 bits of entropy per character: keys and generated passwords
    are; words, paths and identifiers like `max_tokens_per_batch` are not."""
    if not (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)):
        return False
    counts = Counter(value)
    n = len(value)
    entropy = -sum(c / n * math.log2(c / n) for c in counts.values())
    return entropy >= 3.5


def _mask_secrets(text: str, counts: Counter) -> str:
    if _SECRET_HINT.search(text):
        text, n = _KNOWN_SECRETS.subn(marker("secret"), text)
        counts["secret"] += n
    if _names_a_secret(text):
        def repl(m: re.Match) -> str:
            value = m.group(1)
            if value.startswith("[REDACTED") or not _looks_random(value):
                return m.group(0)
            counts["secret"] += 1
            start = m.start(1) - m.start(0)
            return m.group(0)[:start] + marker("secret")
        text = _KEYWORD_VALUE.sub(repl, text)
    return text


# ---- URL credentials and email ------------------------------------------------------------------------------

# scheme://user:password@host: the user and password go, the scheme and host stay (they say what the URL was).
_URL_CREDENTIALS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.-]*://)[^\s:/@]+:[^\s/@]+@(?=[A-Za-z0-9\[])")
_EMAIL = re.compile(r"\b[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}\b")


def _mask_url_credentials(text: str, counts: Counter) -> str:
    if "@" not in text or "://" not in text:
        return text
    text, n = _URL_CREDENTIALS.subn(lambda m: m.group(1) + marker("url_credentials") + "@", text)
    counts["url_credentials"] += n
    return text


def _mask_email(text: str, counts: Counter) -> str:
    if "@" not in text:
        return text
    text, n = _EMAIL.subn(marker("email"), text)
    counts["email"] += n
    return text


# ---- numbers with checksums ---------------------------------------------------------------------------------

_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
# 13-19 digits, optionally grouped by single spaces or dashes (4-4-4-4, 4-6-5 for Amex).
_CARD = re.compile(r"(?<![\d.-])\d(?:[ -]?\d){12,18}(?![\d-]|\.\d)")
_SSN = re.compile(r"(?<![\d-])(\d{3})([- ])(\d{2})\2(\d{4})(?![\d-])")
_HAS_DIGIT = re.compile(r"\d")


def _validated(pattern: re.Pattern, kind: str, valid: Callable[[str], bool]) -> Callable[[str, Counter], str]:
    def mask(text: str, counts: Counter) -> str:
        def repl(m: re.Match) -> str:
            if not valid(m.group(0)):
                return m.group(0)
            counts[kind] += 1
            return marker(kind)
        return pattern.sub(repl, text)
    return mask


def _valid_card(candidate: str) -> bool:
    digits = re.sub(r"[ -]", "", candidate)
    # Issuer ranges of the major networks (2-6); a Luhn-valid run starting with 0, 1, 7, 8 or 9 is rarely a card.
    return 13 <= len(digits) <= 19 and digits[0] in "23456" and luhn.is_valid(digits)


def _valid_ssn(candidate: str) -> bool:
    return stdnum_ssn.is_valid(candidate.replace(" ", "-"))


_mask_iban = _validated(_IBAN, "iban", stdnum_iban.is_valid)
_mask_card = _validated(_CARD, "credit_card", _valid_card)
_mask_ssn = _validated(_SSN, "us_ssn", _valid_ssn)


# ---- IP addresses -------------------------------------------------------------------------------------------

_IPV4 = re.compile(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)")
# Words that make a dotted quad a version (v1.2.3.4, "version 10.0.19041.1") rather than an address.
_VERSION_CONTEXT = re.compile(r"(?i)(?:\bv|\bversion|\bver\.?|\brelease|\bbuild|\bupgrade[ds]? to|\bbump(?:ed)? to)\s*$")
_IPV6 = re.compile(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")


def _mask_ipv4(text: str, counts: Counter) -> str:
    if text.count(".") < 3:
        return text

    def repl(m: re.Match) -> str:
        if _VERSION_CONTEXT.search(text, max(0, m.start() - 16), m.start()):
            return m.group(0)
        counts["ipv4"] += 1
        return marker("ipv4")
    return _IPV4.sub(repl, text)


def _valid_ipv6(candidate: str) -> bool:
    # A time (12:30:45) or a C++ scope (a::b) is not an address: ask for a digit and either '::' or 8 groups.
    if not any(c.isdigit() for c in candidate) or ("::" not in candidate and candidate.count(":") != 7):
        return False
    try:
        ipaddress.IPv6Address(candidate)
    except ValueError:
        return False
    return True


def _mask_ipv6(text: str, counts: Counter) -> str:
    if text.count(":") < 2:
        return text
    return _validated(_IPV6, "ipv6", _valid_ipv6)(text, counts)


# ---- phone numbers ------------------------------------------------------------------------------------------

# Phone-shaped: a +country code and a 1-4 digit area, an (area), or a 2-4 digit group, then up to four groups: 7-15 digits grouped by spaces, dots, dashes or parentheses.
_PHONE = re.compile(r"(?<![\w+.-])(?:\+\d{1,3}[ .-]?(?:\(\d{1,4}\)|\d{1,4})|\(\d{1,4}\)[ .-]?\d{2,4}|\d{2,4})(?:[ .-]?\d{2,4}){1,4}(?![\w-]|\.\d)")
_DATE_LIKE = re.compile(r"^\d{4}[-./]\d{1,2}[-./]\d{1,2}$|^\d{1,2}[-./]\d{1,2}[-./]\d{2,4}$")


def _valid_phone(candidate: str) -> bool:
    digits = sum(c.isdigit() for c in candidate)
    if digits < 7 or digits > 15 or _DATE_LIKE.match(candidate):
        return False
    # Without a +country code the number is read as a US number (the default region of the rules tier).
    try:
        number = phonenumbers.parse(candidate, None if candidate.startswith("+") else "US")
    except phonenumbers.NumberParseException:
        return False
    return phonenumbers.is_valid_number(number)


_mask_phone = _validated(_PHONE, "phone", _valid_phone)


# ---- the masker ---------------------------------------------------------------------------------------------

_NUMERIC = {"iban", "credit_card", "us_ssn", "ipv4", "phone"}
_MASKERS: dict[str, Callable[[str, Counter], str]] = {
    "secret": _mask_secrets,
    "url_credentials": _mask_url_credentials,
    "email": _mask_email,
    "iban": _mask_iban,
    "credit_card": _mask_card,
    "us_ssn": _mask_ssn,
    "ipv6": _mask_ipv6,
    "ipv4": _mask_ipv4,
    "phone": _mask_phone,
}


class PiiMasker:
    """Masks the given kinds (contracts/data-prep.ts PII_KINDS) in a text; one instance serves every record."""

    def __init__(self, kinds: Iterable[str]):
        kinds = list(kinds)
        unknown = sorted(set(kinds) - set(PII_KINDS))
        if unknown:
            raise ValueError(f"mask_pii.kinds: unknown kind(s) {', '.join(unknown)}; expected some of {', '.join(PII_KINDS)}")
        if not kinds:
            raise ValueError("mask_pii.kinds: give at least one kind")
        self.kinds = [k for k in _ORDER if k in kinds]
        self._steps = [(k in _NUMERIC, _MASKERS[k]) for k in self.kinds]

    def mask(self, text: str) -> tuple[str, dict[str, int]]:
        """The masked text and how many matches of each kind were replaced (kinds with none are left out)."""
        counts: Counter = Counter()
        has_digit = _HAS_DIGIT.search(text) is not None
        for numeric, step in self._steps:
            if numeric and not has_digit:
                continue
            text = step(text, counts)
        return text, {k: v for k, v in counts.items() if v}
