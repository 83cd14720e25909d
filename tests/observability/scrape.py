"""Reading a Prometheus scrape with the library's own parser (not with regexes)."""

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of *text* (which must parse): ``(name, labels) -> value``."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample *name* with exactly *labels* in *text*, if there is one."""
    return samples(text).get((name, frozenset(labels.items())))
