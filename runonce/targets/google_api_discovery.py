"""Google's API descriptions (discovery documents) for `google_api` routes: where they come from,
what is kept of them, and the checks a route is held to at start-up.

Where they come from, in this order:

1. the documents runonce carries: `discovery/*.json.gz` next to this module, reduced (below) from
   the discovery cache of google-api-python-client at the version `discovery/SOURCE.json` names
   (`make discovery` regenerates them; a test fails when they no longer match that client);
2. any other API: the whole discovery cache of an installed google-api-python-client, which the
   optional extra `runonce[google-api]` brings (~100 MB, so the image does not carry it).

A document is reduced to what validation and calls need: root URL, service path, locational
endpoints, each method's HTTP method, path and parameters (location, type, pattern, enum), its
request and response schema names, and the schemas' types, formats, enums and output-only marks.
Descriptions are dropped, keeping what they state as rules:

- a field whose description starts "Output only" keeps `readOnly`; "Required." (or BigQuery's
  "[Required]") keeps `required`, on a field and on a query parameter, unless a sentence says the
  field is deprecated ("Deprecated, use network_config.network instead.");
- fields that descriptions name as exclusive ("Only one of `a` or `b` may be set", "Exactly one
  of a, b or c must be set", "a and b are mutually exclusive", "a and b can't be set at the same
  time", a field's own "Mutually exclusive with b." or "Cannot be specified with b.", BigQuery's
  "[Pick one]" on each of them) keep them as `exclusive` groups on their object (BigQuery's "[Pick
  one]" group in `oneOfRequired` too: one of them is needed);
- a list whose description allows one item ("Only one TaskGroup is supported", "Only instances[0]
  is supported now.", "only a single file share is supported") keeps `maxItems`, and
  a `labels` map that holds fewer than 64 ("No more than 32 labels") keeps `maxLabels`, one whose
  keys and values may be longer than 63 characters (Vertex AI's "no longer than 64 characters")
  `maxLabelLength`, and one that reserves key prefixes ('Label names that start with "goog-" … are
  reserved') keeps them;
- a number, an integer or a duration whose description states its bounds as a sentence ("Minimum value is
  10 minutes; maximum value is 14 days.", "The maximum allowed value is 5,000.") keeps `minimum` and
  `maximum` (a duration's in seconds); a bound the API coerces to is not kept; so do "Cannot be
  more than 31 days or less than 10 minutes." and a sign ("Must be non-negative.");
- a string field whose description states its length ("can be up to 128 characters", "The maximum
  length is 2056 bytes.") keeps `maxLength` (characters; of a resource's `name`, `maxIdLength`, the
  length of its last part, the id) or `maxBytes` (UTF-8), and one that must be a
  Cloud Storage URI ("Must be a valid Cloud Storage URL, beginning with `gs://`.", "A path in a Cloud
  Storage bucket") or start with one of the schemes it names ('must begin with either "http://" or
  "https://"') keeps `prefix`, one that is a bucket's name ("requires a Cloud Storage bucket name, not
  a gs://... URI") `notPrefix`, one that names a kind of file ("Must be a .py file.") `suffix`, and
  one (or a list's items) that must be an RFC 1035 label ("Each tag must be 1-63 characters long, and
  comply with RFC1035.") the `idRule` of one;
- a string field whose description lists all it takes ("Possible values include INTERACTIVE and
  BATCH.", "The following values are supported: * CREATE_IF_NEEDED: …") keeps them as `proseEnum`,
  checked in any letter case;
- a `requestId` whose description says it "must be a valid UUID" keeps `uuid`;
- a create's `…Id` query parameter or body field that its description calls the new resource's ID
  ("will become the final component of the resource name", "The ID to use for …", "The
  user-specified id of the job"), and a `name` the caller may choose ("Optionally caller-specified in
  CreateTask") or that a create refuses when taken ("If the specified name is in use by a job, the
  creation request fails with an ALREADY_EXISTS error."), keep `resourceId`; a `name` that is the id
  itself ("provided by the client when initially creating the resource", "The client-assigned sink
  identifier", "must be unique within this project and location", where no `projects/…` full form
  is given) keeps `clientNamed`; a
  `requestId` the API does not act on ("Deprecated. This field has no effect.", "Request ID used for
  debugging.", "A unique ID generated in the API responses.") keeps `noEffect`;
- an id's rule its description states (`described_id_rule`: length, alphabet, first and last
  character, a literal start, a form it must not have) keeps `idRule`, on an `…Id` and on a `name`
  the caller chooses (of a full name, the rule of its id part: "`JOB_ID` can contain only …"); an
  `…Id` of a `…Reference` schema that states none takes the one the document states for that id
  elsewhere (BigQuery's `TableReference.datasetId`, `DatasetReference.datasetId`'s), when it states one.

Discovery documents drop the protos' `oneof` unions, which the APIs enforce: the ones of the
carried documents' schemas are kept in `discovery/oneofs.json` (`make oneofs`, from the protos in
github.com/googleapis/googleapis) and become `exclusive` groups too, and `oneOfRequired` where the
proto says the union is required.

Values are checked as proto3's JSON mapping takes them: int64 as a number or a string of digits,
int32 in its range, enums, durations (`3.5s`), RFC 3339 timestamps, base64 bytes, booleans; a
field the schema does not have, an output-only field, a missing required field, two exclusive
fields, a required union with none set, a null where an object, list or map is needed, a key that
is not text, and labels outside Google's label rule are refused, naming where and what the
document allows.
"""

from __future__ import annotations

import difflib
import gzip
import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import Any

from runonce.errors import RunonceError
from runonce.targets.google import CONTROL_CHARACTER, MAX_LABEL_CHARACTERS, kind_of, label_problem

VENDORED = Path(__file__).with_name("discovery")
ONEOFS = VENDORED / "oneofs.json"
"""The `oneof` groups of the carried documents' schemas, from the APIs' protos (discovery drops them)."""

# Every pattern here is used with `fullmatch` (a `$` would let a trailing newline through).
_DURATION = re.compile(r"(-?)([0-9]+)(?:\.([0-9]{1,9}))?s")
_DATETIME = re.compile(
    r"([0-9]{4}-[0-9]{2}-[0-9]{2})T([0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
"""RFC 3339 as protobuf's parser reads it (google.protobuf.Timestamp's JSON): `T` and `Z` in upper case."""
_DIGITS = re.compile(r"-?[0-9]+")
_DECIMAL = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/_-]{4})*(?:[A-Za-z0-9+/_-]{2}(?:==)?|[A-Za-z0-9+/_-]{3}=?)?")
NOT_REQUIRED = {
    ("cloudbuild.v1", "RepoSource", "repoName"): "a trigger's run (triggers.run) builds the trigger's own repository",
    ("aiplatform.v1", "GoogleCloudAiplatformV1PipelineJobRuntimeConfig", "gcsOutputDirectory"): (
        "a compiled pipeline carries its own root (pipelineSpec.defaultPipelineRoot)"
    ),
    ("bigquery.v2", "BigtableColumn", "qualifierEncoded"): (
        "'If the qualifier is valid UTF-8 string, it can be specified in the qualifier_string field'"
    ),
}
"""Fields marked "Required." where a request may leave them out, each with the reason."""
NOT_BOUNDED = {
    ("dataflow", "RuntimeEnvironment", "maxWorkers"): (
        "Dataflow's quotas allow a job 2,000 workers, 4,000 without a worker zone; 'from 1 to 1000' is older"
    ),
    ("dataflow", "FlexTemplateRuntimeEnvironment", "maxWorkers"): (
        "Dataflow's quotas allow a job 2,000 workers, 4,000 without a worker zone; 'from 1 to 1000' is older"
    ),
}
"""Fields whose description states a maximum the API's own limits page has since raised, each with
the reason: the stated maximum is not kept."""
MAX_LABELS = 64
"""Labels a Google resource holds at most."""
LABEL_FIELDS = ("labels", "additionalUserLabels")
"""Maps of text held to Google's label rule (Dataflow's `additionalUserLabels` documents the same rule)."""
MAX_DURATION_SECONDS = 315_576_000_000
"""google.protobuf.Duration's range: about 10,000 years either way."""
INTEGER_RANGES = {
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint64": (0, 2**64 - 1),
}
_PARAMETER_KEYS = ("location", "type", "format", "pattern", "enum", "repeated", "required")
_SCHEMA_KEYS = ("type", "format", "enum", "$ref")
_REQUIRED = re.compile(r"\s*(?:Required\.|\[Required\])")
_DEPRECATED = re.compile(r"(?:^|[.:]\s+)Deprecated\b")
"""A sentence that says the field is deprecated: a "Required." one is not required any more (AlloyDB's
`Cluster.network`: "Deprecated, use network_config.network instead.")."""
_RESOURCE_ID = re.compile(
    r"final component of|(?:ID|identifier|name) (?:to use for|used to uniquely identify|of the \w+ to create(?! an? ))"
    r"|name of the \w+ becomes"
    r"|\b(?:client|user|caller)[- ](?:assigned|specified|chosen|defined|provided)\b[^.]*?\b(?:id|identifier)\b",
    re.IGNORECASE,
)
_NO_EFFECT = re.compile(
    r"\s*Deprecated\b|.*\b(?:has no effect|used for debugging|for debugging purposes|prevents multiple\s+concurrent"
    r"|generated (?:in|by) the (?:API|server|service)\b)",
    re.DOTALL,
)
"""A `requestId` whose description says the API does not act on it ("Deprecated. This field has no
effect.", "Request ID used for debugging."), one the API makes itself ("A unique ID generated in the API
responses."), or one it acts on only while the first request's work runs ("A tag that
prevents multiple concurrent workflow instances with the same tag from running.": a retry after it
ended starts it again): no handle, though it is named like one."""
_CALLER_NAMED = re.compile(r"\b(?:caller|client|user)[- ](?:specified|chosen)\b", re.IGNORECASE)
"""A resource's `name` the caller may choose on create ("Optionally caller-specified in CreateTask"),
where the description gives it as a full resource name (`projects/…/tasks/TASK_ID`); not Dataflow's
"user-specified" job name, unique only among active jobs."""
_TAKEN = re.compile(
    r"\b(?:in use|already exists?)\b[^.]*?\b(?:ALREADY_EXISTS|409)\b"
    r"|\b(?:ALREADY_EXISTS|409)\b[^.]*?\balready exists\b"
)
"""A resource's `name` whose description says a create with one that is taken fails (Storage
Transfer's "If the specified name is in use by a job, the creation request fails with an
ALREADY_EXISTS error."): the API dedupes on it, as on a caller-chosen name."""
_UUID = re.compile(r"\bmust\s+be\s+a\s+(?:valid\s+)?UUID4?\b|\bIdempotent request UUID\b", re.IGNORECASE)
"""A `requestId` the API takes only as a UUID ("The request ID must be a valid UUID with the exception
that zero UUID is not supported", Compute Engine's and others'; "Must be a UUID4."; "Idempotent request
UUID.")."""
_UNIQUE_NAME = re.compile(r"\bmust be unique within\b", re.IGNORECASE)
"""A `…Name` the API holds unique, so a second create of it is refused (Dataproc's `clusterName`: "The
cluster name, which must be unique within a project."); not a name for people (an account's name)."""
_CLIENT_NAMED = re.compile(
    r"\bprovided by the client when\b|\b(?:client|user|caller)[- ]assigned\b[^.]*?\bidentifier\b", re.IGNORECASE
)
"""A resource's `name` that is its id, chosen by the client on create (Compute Engine's "provided by
the client when initially creating the resource")."""
_NAME = r"`?[A-Za-z_][A-Za-z0-9_]*`?"
_NAMES = rf"{_NAME}(?:\s*,\s*(?:or\s+|and\s+)?{_NAME})*(?:,?\s+(?:or|and)\s+{_NAME})"
_EXCLUSIVE = (
    re.compile(
        rf"(?:Only|Exactly|At most) one of (?:the fields,?\s*)?({_NAMES}),? (?:may|can|must|should) be "
        r"(?:set|specified|used|provided)"
    ),
    re.compile(rf"({_NAMES}) are mutually exclusive"),
    re.compile(rf"({_NAMES}) (?:can't|cannot|can not) be (?:set|specified|used) (?:at the same time|together)"),
)
_EXCLUSIVE_WITH = re.compile(
    rf"(?:[Mm]utually exclusive with|[Cc]annot be specified with) (?:the )?({_NAME})(?: field| below)?\."
)
"""A field's own description naming the one other field it excludes ("Mutually exclusive with
worker_zone.", "Cannot be specified with subnetwork_uri.")."""
_ONLY_ONE = re.compile(
    r"(?:^|\. )(?:For this version, |Currently, |For now, )?[Oo]nly (?:one|a single) `?(\w+(?: \w+)?)`? "
    r"(?:is supported|can be specified)|Only (\w+)\[0\] is supported"
)
"""A list field whose description allows one item ("TaskGroups in the Job. Only one TaskGroup is
supported", "Only instances[0] is supported now.", "only a single file share is supported")."""
_VALUE = r"[A-Z][A-Z0-9_]*[A-Z0-9]"
_CODE = r"[A-Z][A-Z0-9_-]*[A-Z0-9]"
_QUOTED = r'["`][A-Za-z0-9][A-Za-z0-9_.-]*["`]'
_LISTED_VALUES = re.compile(
    rf"Possible values(?: include|:) ({_VALUE}(?:, {_VALUE})*,? (?:and|or) {_VALUE})(?:\.|$)"
    rf"|[Tt]he supported (?:types|values) are ({_CODE}(?:, {_CODE})*,? (?:and|or) {_CODE})[.,]"
    rf"|(?:(?:Supported|Allowed|Acceptable|Valid) values are:?|must be one of) ({_QUOTED}(?:, {_QUOTED})*,? (?:and|or) "
    rf"{_QUOTED})\."
)
"""A string field whose description lists its values in one sentence ("Possible values include
INTERACTIVE and BATCH."), or (`_SUPPORTED_VALUES`) as a list of `* VALUE: what it does`."""
_SUPPORTED_VALUES = re.compile(
    r"The following (?:values|modes|types) are supported:|One or more of the following values are specified:"
)
_BOUND = re.compile(
    r"(?:^|[.;,] ?)(?:The )?(Minimum|Maximum|maximum allowed|minimum allowed) value is ([0-9][0-9,]*)"
    r"(?: (second|minute|hour|day)s?)?(?=[.;,](?![0-9])|$| \()(?!; values above)",
    re.IGNORECASE,
)
"""A number's or a duration's bound its description states as a sentence of its own ("Minimum
value is 10 minutes; maximum value is 14 days.", "The maximum allowed value is 5,000."); a bound the
API coerces to ("values above 100 will be coerced to 100") is no refusal, so it is not kept."""
_SECONDS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_NUMBER = r"([-+]?[0-9][0-9,]*(?:\.[0-9]+)?)(?: (second|minute|hour|day)s?)?"
_RANGES = (
    # "The valid value range is [0, 100).", "Valid range of its value is [1, 100], inclusively.",
    # "Range: [1, 1000].", "It must be in the range [-90.0, +90.0]."
    re.compile(
        r"(?:^|(?<=\. ))"
        r"(?:(?:The )?(?:valid )?(?:value )?range(?: of its value)? is|Range:|(?:It )?must be in the range) "
        rf"([\[(]) ?{_NUMBER}, ?{_NUMBER} ?([\])])(?:,? inclusive(?:ly)?)?\.",
        re.IGNORECASE,
    ),
    # "The value must be between 5 and 100.", "Value should be between 0 and 600 seconds."
    re.compile(
        rf"(?:^|(?<=\. ))(?:The )?(?:Values? |\w+ value )?(?:must|should) be between (){_NUMBER} and {_NUMBER}"
        r"(?: \(inclusive\)|,? inclusive)?()\.",
        re.IGNORECASE,
    ),
    # "…made available to your pipeline during execution, from 1 to 1000.", "The value can be from 48 to 168 hours."
    re.compile(rf"(?:, | be )from (){_NUMBER} to {_NUMBER}()(?: \([^)]*\))?\.(?: |$)"),
)
"""A bound stated as a range, in a sentence of its own ("If …, the range is …" is not one of
them); not in a description that writes numbers in octal."""
_NOT_MORE_OR_LESS = re.compile(
    rf"(?:^|(?<=\. ))Cannot be (?:more|greater|longer) than {_NUMBER} or (?:less|shorter) than {_NUMBER}\."
)
"""Both bounds in one sentence ("Cannot be more than 31 days or less than 10 minutes.")."""
_NOT_NEGATIVE = re.compile(
    r"(?:^|(?<=\. ))(?:The value |Value |It )?[Mm]ust be (?:a )?(non-negative|positive|greater than (?:0|zero))"
    r"(?: integer| number| duration)?(?:\.|,? and less than or equal to ([0-9][0-9,]*)\.)"
)
"""A number's sign as a sentence of its own ("Must be non-negative.", "It must be positive.", "Must be
greater than 0.", "The value must be positive, and less than or equal to 10.")."""
_LENGTH = re.compile(
    r"(?:up to|at most|no (?:more|longer) than|must not exceed|cannot exceed|cannot be (?:more|longer) than|"
    r"(?:the )?max(?:imum)? length(?: is| of|:)|(?:a )?maximum of|limited to|"
    r"(?:the )?maximum allowed \w+ length is|(?<!at least 1 character and )(?:must|should) be less than) "
    r"([0-9][0-9,]*) (?:UTF-8 |Unicode |unicode )?(characters|bytes)"
    r"|([0-9][0-9,]*) (characters|bytes) or (?:less|fewer)",
    re.IGNORECASE,
)
"""A string's length limit its description states ("The name can be up to 128 characters long", "The
maximum length is 1,024 characters.", "The maximum length is 2056 bytes.", "must be less than 255
characters", "The maximum allowed URL length is 2083 characters after encoding.", "2048 characters or
less", "a maximum of 64 characters", "Max length: 100 bytes"); not in a sentence that sets a
condition first ("If the first character is a number, …")."""
_FORBIDDEN_FORM = re.compile(
    r"\b(?:must|should|may|can) ?not\b(?:(?!\. )[^/])*?(?<![\w`])/\^?([^/\s]+?)\$?/(i?)\)?\.?", re.IGNORECASE
)
"""A form an id must not have, as a regular expression ("Must not be UUID-like
/[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}/.", "must not be permitted to be a UUID (or UUID-like:
anything matching /^[0-9a-f]{8}…$/i)")."""
_ONLY_THESE = re.compile(r"\bonly\b|\bvalid characters\b|\b(?:may|can) contain\b", re.IGNORECASE)
"""Words that say the alphabet that follows is all an id may hold."""
_LETTER_FIRST = re.compile(
    r"(?:start|begin)s? with (?:an? )?(?:lower-?case |english )?letter"
    r"(?! or (?:an? )?(?:number|digit|numeral|underscore|international))"
    r"|first character (?:must be a|a letter)"
)
_NOT_DIGIT_FIRST = re.compile(r"first character cannot be a number( or (?:a )?hyphen)?")
"""A first character that is no digit (and, "or hyphen", no `-`): an `_` may open the id."""
_BOTH_ENDS_ALPHANUMERIC = (
    r"|first and last characters? must be (?:a )?letters? or numbers?"
    r"|(?:start|begin) and end with (?:an? )?alpha-?numeric"
)
_ALPHANUMERIC_FIRST = re.compile(
    r"(?:start|begin)s? with an? alpha-?numeric character|first character (?:has to|must) be alpha-?numeric"
    + _BOTH_ENDS_ALPHANUMERIC
)
_LETTER_OR_NUMBER_LAST = re.compile(
    r"(?:ends? with|(?:the )?last(?: character)?(?: must be| is)?) (?:a |an )?(?:letter|number|digit)"
    r" or (?:a |an )?(?:letter|number|digit)" + _BOTH_ENDS_ALPHANUMERIC
)
_NOT_AT_ENDS = re.compile(
    r"(?:cannot|can't|must not) (?:(begin|start) or )?end with (?:an? )?(underscore|hyphen|dash)"
    r"(?: or (?:an? )?(underscore|hyphen|dash))?",
    re.IGNORECASE,
)
"""Characters an id must not end (or, "begin or end", open) with ("Cannot begin or end with underscore or
hyphen.", "must not end with a dash")."""
_STARTS_WITH = re.compile(
    r"((?:must|should|may|can) ?not |can't |must never )?(?:start|begin)(?:s|ning|ing)? with "
    r"[`\"']+([^`\"'\s]+)[`\"']+",
    re.IGNORECASE,
)
"""A literal an id must (or must not) start with ("beginning with `dc_`", 'must not start with `"goog"`')."""
_CONDITION = re.compile(r"(?:If|When|For|Unless|In case)\b")
_SCHEMES = re.compile(r'must begin with either "([a-z]+://)" or "([a-z]+://)"')
"""A URL's schemes its description names (Cloud Tasks: 'must begin with either "http://" or "https://"')."""
_GCS_PREFIX = re.compile(
    r"(?:must|should) (?:start with|begin with|be a valid Cloud Storage URL, beginning with|"
    r"be (?:in|of) the (?:following )?(?:format|form):?|be specified in the (?:following )?format:?) `?gs://"
    r"(?![^.]*\(other UR)",
    re.IGNORECASE,
)
"""A string that must be a Cloud Storage URI ("The URI must start with `gs://`", "Must be a valid Cloud
Storage URL, beginning with `gs://`.", "must be in the following format: `gs://{bucket_id}/{object_id}`");
not where the API ignores other forms ("(other URI formats are ignored)")."""
_GCS_PATH = re.compile(r"\bA path in a Cloud Storage bucket\b")
"""A Cloud Storage path too ("A path in a Cloud Storage bucket, which will be treated as the root output
directory of the pipeline.")."""
_BUCKET_NAME = re.compile(r"\bbucket name, not a `?gs://")
"""A bucket's name and no URI ("This field requires a Cloud Storage bucket name, not a gs://... URI")."""
_FILE_SUFFIX = re.compile(r"\bMust be a (\.[a-z0-9]+) file\b")
"""The file a URI must name ("Must be a .py file.")."""
_RFC_1035 = re.compile(r"\b1-63 characters long,? and comply with \[?RFC ?1035\b")
"""An RFC 1035 label ("Each tag must be 1-63 characters long, and comply with [RFC1035](…)")."""
RFC_1035_RULE = {
    "pattern": "[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?",
    "words": "1-63 characters of a-z 0-9 -, starting with a letter, ending with a letter or digit (RFC 1035, as "
    "its description states)",
}
_MAX_LABELS = re.compile(r"No more than ([0-9]+) labels")
_LABEL_LENGTH = re.compile(r"\b[Ll]abel keys and values can be no longer than ([0-9]+) characters")
_IDENTIFYING = frozenset(
    {"uri", "url", "email", "account", "image", "path", "location", "network", "subnetwork", "zone", "region"}
    | {"id", "uid", "uuid", "name", "type", "bucket", "directory", "topic", "subscription", "audience"}
    | {"project", "dataset", "table", "branch", "tag", "sha", "version", "host", "domain"}
    | {"reservation", "service", "attachment", "cluster", "range", "field"}
)
"""The last words of string fields that name or locate something (`imageUri`, `serviceAccount`,
`tempLocation`, `jarFileUris`, `kmsKeyName`, `machineType`, `metastoreService`, `reservedIpRanges`,
clustering `fields`): no URI, path, email, name or id holds a control character. (Not `…Key`: a
private key's PEM text holds newlines; not a name for people to read, `displayName` or
`friendlyName`, which the APIs take as any text.)"""
_FREE_TEXT_NAMES = ("display", "friendly")
_RESERVED_LABELS = re.compile(r"[Ll]abel (?:names|keys) that (?:start|begin) with ([^.]*?) are reserved")
"""Key prefixes a `labels` map's description reserves (Batch: 'start with "goog-" or "google-"')."""


JSON_VALUES = "text, numbers, true, false, null, lists and mappings"
YAML_KINDS = {"date": "a date", "datetime": "a timestamp", "bytes": "binary data (!!binary)", "set": "a set (!!set)"}


class DocumentNotFound(RunonceError):
    """No description of the API named: the message says which ones there are."""


# --- reduction ------------------------------------------------------------------------------------


def _reduce_schema(schema: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {key: schema[key] for key in _SCHEMA_KEYS if key in schema}
    description = schema.get("description")
    description = description if isinstance(description, str) else ""
    if schema.get("readOnly") or description.lstrip().startswith("Output only"):
        out["readOnly"] = True
    elif _REQUIRED.match(description) and not _DEPRECATED.search(description):
        out["required"] = True
    if "properties" in schema:
        out["properties"] = {name: _reduce_schema(field) for name, field in schema["properties"].items()}
        for name, field in schema["properties"].items():
            text = str(field.get("description", ""))
            if (
                (name.endswith("Id") and name != "requestId" and _RESOURCE_ID.search(text))
                or (name == "name" and _CALLER_NAMED.search(text) and "projects/" in text)
                or (name == "name" and _TAKEN.search(" ".join(text.split())))
                or (name.endswith("Name") and _UNIQUE_NAME.search(text))
            ):
                out["properties"][name]["resourceId"] = True
            # (a description that gives the name as `projects/…` or `accounts/{account}/…` means a full
            # name: not the id itself)
            full_name = "projects/" in text or "/{" in text
            if name == "name" and not full_name and (_CLIENT_NAMED.search(text) or _UNIQUE_NAME.search(text)):
                out["properties"][name]["clientNamed"] = True
            rule = _id_rule_of(name, text, out["properties"][name])
            if rule:
                out["properties"][name]["idRule"] = rule
            if name == "requestId" and _NO_EFFECT.match(text):
                out["properties"][name]["noEffect"] = True
            if name == "requestId" and _UUID.search(text):
                out["properties"][name]["uuid"] = True
            only_one = _ONLY_ONE.search(" ".join(text.split()))
            noun = re.sub(r"\s", "", only_one.group(1) or only_one.group(2)).lower() if only_one else ""
            if field.get("type") == "array" and noun in (name.lower(), name.lower().removesuffix("s")):
                out["properties"][name]["maxItems"] = 1
            out["properties"][name].update(prose_bounds(text, field))
            # a text field's rules, or each text item's of a list (BigQuery's `schemaUpdateOptions`)
            strings = (
                out["properties"][name].get("items", {}) if field.get("type") == "array" else out["properties"][name]
            )
            if strings.get("type") == "string" and not strings.get("format") and "enum" not in strings:
                values = prose_values(text)
                strings.update(prose_string_rules(text) | ({"proseEnum": values} if values else {}))
                if name == "name" and "maxLength" in strings:  # a resource's name: the limit is its id's
                    strings["maxIdLength"] = strings.pop("maxLength")
            most_labels = _MAX_LABELS.search(text)
            if name in LABEL_FIELDS and most_labels:
                out["properties"][name]["maxLabels"] = int(most_labels.group(1))
            longest = _LABEL_LENGTH.search(" ".join(text.split()))
            if name in LABEL_FIELDS and longest and int(longest.group(1)) != MAX_LABEL_CHARACTERS:
                out["properties"][name]["maxLabelLength"] = int(longest.group(1))
            reserved = _RESERVED_LABELS.search(text)
            if name in LABEL_FIELDS and reserved:
                out["properties"][name]["reservedPrefixes"] = re.findall(r'"([^"]+)"', reserved.group(1))
        groups = exclusive_groups(schema)
        if groups:
            out["exclusive"] = groups
        # "[Pick one]": one of them is needed too (a copy's source tables, an extract's destination URIs)
        pick_one = sorted(
            name for name, field in schema["properties"].items() if "[Pick one]" in str(field.get("description"))
        )
        if len(pick_one) > 1:
            out["oneOfRequired"] = [pick_one]
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            out[key] = _reduce_schema(schema[key])
    return out


def _id_rule_of(name: str, text: str, field: dict[str, Any]) -> dict[str, str] | None:
    """The id rule a field's description states: of an `…Id`, of a `name` that is the id (Compute
    Engine's), or of the id part of a full `name` the caller chooses ("`JOB_ID` can contain only …")."""
    if (name.endswith("Id") and name != "requestId") or field.get("clientNamed"):
        return described_id_rule(text)
    parts = re.split(r"(?=`[A-Z_]+_ID` can contain)", " ".join(text.split()))
    return described_id_rule(parts[-1]) if name == "name" and field.get("resourceId") and len(parts) > 1 else None


def prose_values(text: str) -> list[str]:
    """The values a string field's description lists as all it takes (BigQuery's dispositions
    and priority), or []: only a sentence that is the list, or a `* VALUE:` list."""
    text = " ".join(text.split())
    listed = _LISTED_VALUES.search(text)
    if listed and listed.group(1):
        return re.findall(_VALUE, listed.group(1))
    if listed and listed.group(2):
        return re.findall(_CODE, listed.group(2))
    if listed:  # quoted values, checked in any letter case as the others are
        return [value.upper() for value in re.findall(r"[\"`]([^\"`]+)[\"`]", listed.group(3))]
    supported = _SUPPORTED_VALUES.search(text)
    if supported:
        return re.findall(rf"\* `?({_VALUE})`?:", text[supported.end() :])
    return []


def prose_bounds(text: str, field: dict[str, Any]) -> dict[str, float | int]:
    """`minimum` and `maximum` of a number or an integer field, or of a duration in seconds, from its
    description's sentences (`_BOUND`, `_RANGES`; an open end of an integer's range is the next
    whole number, of another's is left out); {} for any other field."""
    duration = field.get("format") == "google-duration"
    if not duration and field.get("type") not in ("integer", "number") and field.get("format") not in INTEGER_RANGES:
        return {}
    text = " ".join(text.split())
    bounds: dict[str, float | int] = {}
    for which, number, unit in _BOUND.findall(text):
        if duration and not unit:
            continue  # a duration's bound names its unit
        value = int(number.replace(",", "")) * (_SECONDS[unit.lower()] if duration else 1)
        bounds["minimum" if which.lower().startswith("min") else "maximum"] = value
    integer = not duration and field.get("type") != "number"
    for pattern in () if "octal" in text else _RANGES:
        for opens, low, low_unit, high, high_unit, closes in pattern.findall(text):
            unit = high_unit or low_unit
            if duration and not unit:
                continue
            seconds = _SECONDS[unit.lower()] if duration else 1
            low_value, high_value = (
                float(low.replace(",", "")) * (_SECONDS[(low_unit or unit).lower()] if duration else 1),
                float(high.replace(",", "")) * seconds,
            )
            if opens != "(" or integer:
                bounds["minimum"] = _whole(low_value + (1 if opens == "(" else 0))
            if closes != ")" or integer:
                bounds["maximum"] = _whole(high_value - (1 if closes == ")" else 0))
    for high, high_unit, low, low_unit in _NOT_MORE_OR_LESS.findall(text):
        if duration and not (high_unit and low_unit):
            continue
        for which, number, unit in (("maximum", high, high_unit), ("minimum", low, low_unit)):
            bounds[which] = _whole(float(number.replace(",", "")) * (_SECONDS[unit.lower()] if duration else 1))
    for sign, most in _NOT_NEGATIVE.findall(text):
        bounds["minimum"] = 1 if integer and sign != "non-negative" else 0
        if most:
            bounds["maximum"] = int(most.replace(",", ""))
    return bounds


def prose_string_rules(text: str) -> dict[str, Any]:
    """`maxLength` (characters) or `maxBytes` (UTF-8), the `gs://` `prefix`, a bucket name's
    `notPrefix` and a file's `suffix` a string field's description states, each in a sentence that
    sets no condition first; {} when it states none."""
    rules: dict[str, Any] = {}
    for sentence in re.split(r"(?<=\.) ", " ".join(text.split())):
        if _CONDITION.match(sentence):
            continue
        length = _LENGTH.search(sentence)
        if length and re.search(r"(?<![\w-])[0-9][0-9,]* (?:characters|bytes)\b", sentence[length.end() :]):
            length = None  # two limits in one sentence, each for a case ("24 … for user-scoped, 40 … for event-scoped")
        if length:
            number, unit = length.group(1, 2) if length.group(1) else length.group(3, 4)
            limit = int(number.replace(",", "")) - (1 if "less than" in length.group(0).lower() else 0)
            rules["maxBytes" if unit.lower() == "bytes" else "maxLength"] = limit
        if _GCS_PREFIX.search(sentence) or _GCS_PATH.search(sentence):
            rules["prefix"] = ["gs://"]
        if _BUCKET_NAME.search(sentence):
            rules["notPrefix"] = "gs://"
        suffix = _FILE_SUFFIX.search(sentence)
        if suffix:
            rules["suffix"] = suffix.group(1)
        if _RFC_1035.search(sentence):
            rules["idRule"] = RFC_1035_RULE
        schemes = _SCHEMES.search(sentence)
        if schemes:
            rules["prefix"] = list(schemes.groups())
    return rules


def described_id_rule(text: str) -> dict[str, str] | None:
    """The rule a resource id's description states, as `{"pattern", "words"}` for `re.fullmatch`,
    or None when it states none (AIP-122's applies): its length ("4-32 characters", "between 2 and 64
    characters", "a minimum of 3 characters and a maximum of 64 characters", "Max length: 100 bytes"),
    its alphabet as a character class or a whole regular expression (`[a-z0-9_]`,
    `^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$`, and `/a-z-/`, a class whose brackets the documents' Markdown
    lost) or in words ("uppercase and lowercase letters, numerals, and the hyphen (`-`) and underscore
    (`_`) characters": letters are of either case unless only lower case is named), a letter (or no
    digit) first, a letter or number last, no `_` or `-` at its ends ("Cannot begin or end with
    underscore or hyphen."), a literal start ("beginning with `dc_`"), a form it must not have ("Must
    not be UUID-like /…/"); a length without an alphabet keeps AIP-122's alphabet. The words say the
    rule as it is checked."""
    text = " ".join(text.split())
    forbidden = _FORBIDDEN_FORM.search(text)
    positive = text[: forbidden.start()] + text[forbidden.end() :] if forbidden else text
    span = re.search(r"\b(?:between )?([0-9]+) ?(?:-|to|and) ?([0-9]+) (?:[a-z]+ ){0,2}characters", positive)
    least = re.search(r"\b(?:a minimum of|at least) ([0-9]+) characters", positive, re.IGNORECASE)
    stated = prose_string_rules(positive)
    most = str(stated.get("maxLength", stated.get("maxBytes", "")))
    low, high = (span.group(1), span.group(2)) if span else (least.group(1) if least else "1", most)
    pattern = _stated_class(positive)
    shape, ends = f"matching {pattern}", []
    if pattern and not re.search(r"[{}+*?]", pattern):
        shape = f"of {_class_words(pattern)}"
        pattern += f"{{{low},{high}}}"  # `{3,}` without a stated maximum
    elif (
        not pattern
        and re.search(r"\b(?:letters|alpha-?numeric)\b", positive)
        and (high or _ONLY_THESE.search(positive) or re.search(r"\bconsists? of\b", positive))
    ):
        high = high or "63"  # no length stated: AIP-122's
        pattern = _words_class(positive)
        shape = f"of {_class_words(pattern)}"
        pattern += f"{{{low},{high}}}"
    elif not pattern and span:  # a length, and no alphabet: AIP-122's
        pattern = "[a-z](?:[a-z0-9-]*[a-z0-9])?"
        shape = "of a-z 0-9 -"
        ends = ["starting with a letter", "ending with a letter or digit"]
    if not pattern:
        return None
    count = f"{low}-{high} characters " if high else f"at least {low} characters " if low != "1" else ""
    said = [count + shape if count or shape.startswith("matching") else f"characters {shape}", *ends]
    if high:
        pattern = f"(?=.{{{low},{high}}}\\Z){pattern}"
    if _LETTER_FIRST.search(positive):
        pattern = f"(?=[A-Za-z]){pattern}"
        said.append("starting with a letter")
    elif _ALPHANUMERIC_FIRST.search(positive):
        pattern = f"(?=[A-Za-z0-9]){pattern}"
        said.append("starting with a letter or digit")
    elif not_digit := _NOT_DIGIT_FIRST.search(positive):
        pattern = f"(?![0-9{'-' if not_digit.group(1) else ''}]){pattern}"
        said.append(f"not starting with a digit{' or -' if not_digit.group(1) else ''}")
    if _LETTER_OR_NUMBER_LAST.search(positive):
        pattern = f"(?=.*[A-Za-z0-9]\\Z){pattern}"
        said.append("ending with a letter or digit")
    elif not_at_ends := _NOT_AT_ENDS.search(positive):
        characters = "".join(
            sorted({"_" if word == "underscore" else "-" for word in not_at_ends.groups()[1:] if word})
        )
        pattern = f"(?!.*[{characters}]\\Z){pattern}"
        if not_at_ends.group(1):
            pattern = f"(?![{characters}]){pattern}"
        said.append(f"not {'starting or ' if not_at_ends.group(1) else ''}ending with {' or '.join(characters)}")
    for negated, start in _STARTS_WITH.findall(positive):
        pattern = f"(?{'!' if negated else '='}{re.escape(start)}){pattern}"
        said.append(f"{'not ' if negated else ''}starting with {start!r}")
    if forbidden and _compiles(forbidden.group(1)):
        pattern = f"(?!(?{'i' if forbidden.group(2) else ''}:{forbidden.group(1)})\\Z){pattern}"
        said.append(f"not of the form {forbidden.group(1)}")
    if not _compiles(pattern):  # a stated length reversed ("1 to 0 characters")
        return None
    return {"pattern": pattern, "words": ", ".join(dict.fromkeys(said)) + " (as its description states)"}


def _stated_class(text: str) -> str:
    """The character class (or whole expression) a description gives an id, '' when it gives none."""
    regex = (
        re.search(r"`/?\^?(\[[^`]*?)\$?/?`", text)
        or re.search(r"(?<![\w`])/\^?(\[[^/\s]*?)\$?/", text)
        or re.search(
            r"\bmatch(?:es)? the (?:following )?(?:pattern|regex|regular expression):? \^?(\[\S+?)\$?[.,;)]*(?:\s|$)",
            text,
        )
    )
    if regex and re.fullmatch(r"\[[A-Z_]+\]", regex.group(1)):
        regex = None  # a placeholder (`[SPAN_ID]`), no class
    several = regex and re.fullmatch(r"(?:\[[^\[\]]+\]|[-_.])+", regex.group(1))
    if regex and several and not re.fullmatch(r"\[[^\[\]]+\]", regex.group(1)):
        # `[a-z][0-9]-`, `[a-z]-`: one class written as several (Dataproc's, IAP's ids)
        return _one_class("".join(re.findall(r"[^\[\]]+", regex.group(1))))
    if regex and _compiles(_python_regex(regex.group(1))):
        return _python_regex(regex.group(1))
    lost = re.search(r"(?<![\w`])`?/\^?((?=[-_.]*[a-zA-Z0-9]-)(?:[a-zA-Z0-9]-[a-zA-Z0-9]|[-_.])+)\+?\$?/`?", text)
    if lost:  # `/a-z-/` is `[a-z][0-9]-`: its brackets were taken for a Markdown link, and `[0-9]` with them
        class_text = lost.group(1)
        lost_digits = class_text.startswith("a-z") and "0-9" not in class_text and len(class_text) > 3
        return _one_class("a-z0-9" + class_text[3:] if lost_digits else class_text)
    return ""


def _one_class(characters: str) -> str:
    """`[…]` of `characters` (ranges and single characters), a `-` that is no range put last."""
    ranges = re.findall(r"[a-zA-Z0-9]-[a-zA-Z0-9]", characters)
    rest = re.sub(r"[a-zA-Z0-9]-[a-zA-Z0-9]", "", characters)
    singles = sorted(set(rest) - {"-"})
    return "[" + "".join(ranges) + "".join(singles) + ("-" if "-" in rest else "") + "]"


def _class_words(character_class: str) -> str:
    """A character class as a refusal says it: `[a-zA-Z0-9_.-]` -> `a-z A-Z 0-9 _ . -`."""
    inner = re.fullmatch(r"\(\?:\[(.*)\]\|\[\^\\x00-\\x9f\]\)|\[([^\^].*)\]", character_class)
    if inner is None:
        return character_class
    parts = re.findall(r"\\w|\\d|\\.|.-(?!\])(?:\\.|.)|.", inner.group(1) or inner.group(2))
    named = {"\\w": "any letter", "\\d": "any digit"}
    said = " ".join(named.get(part, part.replace("\\", "")) for part in parts)
    return said + " and letters of any script" if inner.group(1) else said


def _words_class(text: str) -> str:
    """The character class an id's description names in words."""
    lower = re.search(r"\blower-? ?cased?\b", text, re.I) or re.search(r"(?<!\w)a-z", text)
    upper = re.search(r"\bupper-? ?case\b|\bupper-?(?: and| or|,) lower", text, re.I) or re.search(r"(?<!\w)A-Z", text)
    alphabet = "a-z" if lower and not upper else "a-zA-Z"
    alphabet += "0-9" if re.search(r"\b(?:numerals|numbers|digits|numeric|alpha-?numeric)\b", text) else ""
    alphabet += "_" if re.search(r"\bunderscores?\b|[`'\"(]_[`'\")]", text) else ""
    alphabet += "." if re.search(r"\b(?:periods?|dots?)\b|[`'\"(]\.[`'\")]", text) else ""
    alphabet += "-" if re.search(r"\b(?:hyphens?|dashes)\b|[`'\"(]-[`'\")]", text) else ""
    if re.search(r"\bunicode letters\b", text, re.I):  # Python's `re` has no categories: any letter past ASCII
        return f"(?:[{alphabet}]|[^\\x00-\\x9f])"
    return f"[{alphabet}]"


def _python_regex(regex: str) -> str:
    """A description's regular expression as Python's `re` reads it: `\\p{L}` (any letter) and
    `\\p{N}` (any digit), which `re` lacks, become `\\w` and `\\d` (Healthcare's
    `[\\p{L}\\p{N}_\\-\\.]{1,256}`)."""
    return regex.replace("\\p{L}", "\\w").replace("\\p{N}", "\\d")


def _compiles(regex: str) -> bool:
    try:
        re.compile(regex)
    except re.error:
        return False
    return True


def _whole(number: float) -> float | int:
    return int(number) if number.is_integer() else number


def camel(name: str) -> str:
    """A proto field's JSON name: `main_jar_file_uri` (or `` `worker_zone` ``) -> `mainJarFileUri`."""
    head, *rest = name.strip("`").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def exclusive_groups(schema: dict[str, Any]) -> list[list[str]]:
    """The groups of an object's fields that its descriptions say cannot be set together: only
    sentences naming two or more of this object's own fields count (snake_case names are read as
    the JSON's camelCase)."""
    properties = schema.get("properties") or {}
    texts = [schema.get("description")] + [field.get("description") for field in properties.values()]
    found: list[list[str]] = []
    for text in texts:
        if not isinstance(text, str):
            continue
        text = " ".join(text.split())
        for pattern in _EXCLUSIVE:
            for match in pattern.finditer(text):
                found.append([camel(name) for name in re.findall(_NAME, match.group(1)) if name not in ("or", "and")])
    for name, field in properties.items():
        excludes = _EXCLUSIVE_WITH.search(" ".join(str(field.get("description", "")).split()))
        if excludes:
            found.append([name, camel(excludes.group(1))])
    # BigQuery marks the fields of an object that stand for one another "[Pick one]"
    found.append([name for name, field in properties.items() if "[Pick one]" in str(field.get("description"))])
    groups: list[list[str]] = []
    for names in found:
        group = sorted(set(names))
        if len(group) >= 2 and all(name in properties for name in group) and group not in groups:
            groups.append(group)
    return sorted(groups)


def _walk_methods(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield from resource.get("methods", {}).values()
    for child in resource.get("resources", {}).values():
        yield from _walk_methods(child)


def reduce_document(doc: dict[str, Any]) -> dict[str, Any]:
    """The part of a discovery document runonce uses (see the module's docstring)."""
    methods = {}
    for spec in _walk_methods(doc):
        parameters = {}
        for name, param in spec.get("parameters", {}).items():
            parameters[name] = {key: param[key] for key in _PARAMETER_KEYS if key in param}
            text = str(param.get("description", ""))
            if name.endswith("Id") and name != "requestId" and _RESOURCE_ID.search(text):
                parameters[name]["resourceId"] = True
            rule = described_id_rule(text) if name.endswith("Id") and name != "requestId" else None
            if rule:
                parameters[name]["idRule"] = rule
            if name == "requestId" and _NO_EFFECT.match(text):
                parameters[name]["noEffect"] = True
            if param.get("location") == "query" and _REQUIRED.match(text) and not _DEPRECATED.search(text):
                parameters[name]["required"] = True
            if name == "requestId" and _UUID.search(text):
                parameters[name]["uuid"] = True
        methods[spec["id"]] = {
            "httpMethod": spec["httpMethod"],
            "path": spec["path"],
            "parameters": parameters,
            "request": spec.get("request", {}).get("$ref"),
            "response": spec.get("response", {}).get("$ref"),
        }
    locational: dict[str, str] = {}
    for endpoint in doc.get("endpoints", []):
        location, url = endpoint.get("location"), endpoint.get("endpointUrl")
        if location and isinstance(url, str) and url.startswith(f"https://{location}-"):
            locational[location] = url
    schemas = {name: _reduce_schema(schema) for name, schema in doc.get("schemas", {}).items()}
    for api, schema_name, field in NOT_BOUNDED:
        if api == doc["name"] and field in schemas.get(schema_name, {}).get("properties", {}):
            schemas[schema_name]["properties"][field].pop("maximum", None)
    _refer_with_rules(schemas)
    return {
        "name": doc["name"],
        "version": doc["version"],
        "rootUrl": doc["rootUrl"],
        "servicePath": doc.get("servicePath", ""),
        "locational": locational,
        "methods": methods,
        "schemas": schemas,
    }


# --- loading --------------------------------------------------------------------------------------


def _refer_with_rules(schemas: dict[str, Any]) -> None:
    """An id in a reference to a resource (BigQuery's `TableReference.datasetId`) that states no
    rule of its own takes the one the document states for that id where it is the resource's own
    (`DatasetReference.datasetId`: "only letters, numbers, or underscores"), when it states one."""
    stated: dict[str, dict[tuple[str, str], str]] = {}  # id field -> {(pattern, words): a schema stating it}
    for schema_name, schema in schemas.items():
        for name, field in (schema.get("properties") or {}).items():
            if "idRule" in field:
                stated.setdefault(name, {})[field["idRule"]["pattern"], field["idRule"]["words"]] = schema_name
    for schema_name, schema in schemas.items():
        for name, field in (schema.get("properties") or {}).items():
            rules = stated.get(name, {})
            if schema_name.endswith("Reference") and name.endswith("Id") and "idRule" not in field and len(rules) == 1:
                [((pattern, words), source)] = rules.items()
                words = words.replace("(as its description states)", f"(as the description of {source}.{name} states)")
                field["idRule"] = {"pattern": pattern, "words": words}


def vendored_names() -> list[str]:
    """The APIs runonce carries (`batch.v1`, …)."""
    return sorted(path.name.removesuffix(".json.gz") for path in VENDORED.glob("*.json.gz"))


def _client_cache() -> Path | None:
    """google-api-python-client's discovery cache, when the `google-api` extra is installed."""
    try:
        import googleapiclient  # type: ignore[import-untyped]  # deferred: an optional extra, only for an API runonce does not carry
    except ImportError:
        return None
    return Path(googleapiclient.__file__).parent / "discovery_cache" / "documents"


@cache
def load(api: str) -> ApiDocument:
    """The description of `api` (`name.version`), or `DocumentNotFound` saying what there is."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*\.[a-z0-9_.]+", api):
        raise DocumentNotFound(f"{api!r} is not an API as name.version (e.g. batch.v1)")
    vendored = VENDORED / f"{api}.json.gz"
    if vendored.is_file():
        return ApiDocument(with_oneofs(json.loads(gzip.decompress(vendored.read_bytes())), api))
    cache_dir = _client_cache()
    if cache_dir is not None and (cache_dir / f"{api}.json").is_file():
        return ApiDocument(reduce_document(json.loads((cache_dir / f"{api}.json").read_text(encoding="utf-8"))))
    where = (
        "nor in google-api-python-client's discovery cache"
        if cache_dir
        else "(install runonce[google-api] for any other)"
    )
    raise DocumentNotFound(
        f"no discovery document {api!r} among those runonce carries ({', '.join(vendored_names())}) {where}"
    )


@cache
def _oneofs() -> dict[str, Any]:
    apis: dict[str, Any] = json.loads(ONEOFS.read_text(encoding="utf-8"))["apis"]
    return apis


def with_oneofs(data: dict[str, Any], api: str) -> dict[str, Any]:
    """A carried document with its protos' `oneof` groups (`discovery/oneofs.json`): each one
    `exclusive` (at most one field set), and a required one also in `oneOfRequired` (one needed)."""
    for schema_name, groups in _oneofs().get(api, {}).items():
        schema = data["schemas"][schema_name]
        for group in groups:
            fields = sorted(group["fields"])
            if fields not in schema.setdefault("exclusive", []):
                schema["exclusive"].append(fields)
            if group.get("required"):
                schema.setdefault("oneOfRequired", []).append(group["fields"])
    return data


# --- the document ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiMethod:
    """One method of a document, by its full id (`batch.projects.locations.jobs.create`)."""

    id: str
    http_method: str
    path: str
    parameters: dict[str, dict[str, Any]]
    request: str | None
    response: str | None

    def path_parameters(self) -> list[str]:
        return [name for name, spec in self.parameters.items() if spec.get("location") == "path"]


class ApiDocument:
    def __init__(self, data: dict[str, Any]):
        self.name: str = data["name"]
        self.version: str = data["version"]
        self.root_url: str = data["rootUrl"]
        self.service_path: str = data["servicePath"]
        self.locational: dict[str, str] = data["locational"]
        self.schemas: dict[str, Any] = data["schemas"]
        self._methods: dict[str, Any] = data["methods"]
        firsts = {method_id.split(".", 1)[0] for method_id in self._methods}
        self._prefix = firsts.pop() if len(firsts) == 1 else self.name
        """What every method id starts with: mostly the API's name, not always (sqladmin's are `sql.…`)."""

    @property
    def api(self) -> str:
        return f"{self.name}.{self.version}"

    def method(self, method_id: str) -> ApiMethod | None:
        """The method `method_id`, as the document names it, with or without what every id of the
        document starts with (the API's name, mostly)."""
        full = method_id if method_id in self._methods else f"{self._prefix}.{method_id}"
        spec = self._methods.get(full)
        if spec is None:
            return None
        return ApiMethod(
            full, spec["httpMethod"], spec["path"], spec["parameters"], spec.get("request"), spec.get("response")
        )

    def method_ids(self) -> list[str]:
        """Every method's full id, sorted."""
        return sorted(self._methods)

    def similar_methods(self, method_id: str, limit: int = 6) -> list[str]:
        """Method ids (without the API's name) sharing the most trailing parts with `method_id`."""
        wanted = method_id.removeprefix(f"{self._prefix}.").split(".")
        short = [full.removeprefix(f"{self._prefix}.") for full in self._methods]

        def shared(candidate: str) -> int:
            parts = candidate.split(".")
            return sum(a == b for a, b in zip(reversed(parts), reversed(wanted), strict=False))

        ranked = sorted((c for c in short if shared(c) > 0), key=lambda c: (-shared(c), c))
        return ranked[:limit]

    def default_endpoint(self, location: str | None) -> str:
        """The locational host (`https://us-central1-aiplatform.googleapis.com`) for `location`
        when the document lists one, else the document's root URL; without the trailing `/`."""
        url = self.locational.get(location or "") or self.root_url
        return url.rstrip("/")

    def field(self, schema_name: str, dotted: str) -> dict[str, Any] | None:
        """The schema of the field `a.b` of `schema_name`, or None when there is no such field."""
        schema: dict[str, Any] = {"$ref": schema_name}
        for part in dotted.split("."):
            schema = self.resolve(schema)
            properties = schema.get("properties") or {}
            if part not in properties:
                return None
            schema = properties[part]
        return self.resolve(schema)

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        while "$ref" in schema:
            schema = self.schemas[schema["$ref"]]
        return schema

    def value_problem(
        self, value: Any, schema: dict[str, Any], where: str, given: frozenset[str] = frozenset()
    ) -> str | None:
        """What is wrong with `value` as a request field of `schema`, naming where and what the
        document allows; None when it fits. `given`: fields the call's path carries (a required
        `projectId` or `name` is given there)."""
        kind_name = schema.get("$ref")
        schema = self.resolve(schema)
        kind = schema.get("type")
        if kind == "object" or "properties" in schema:
            return self._object_problem(value, schema, where, kind_name or "object", given)
        if kind == "array":
            if not isinstance(value, list):
                return f"{where}: expected an array, got {_shown(value)}"
            if len(value) > schema.get("maxItems", len(value)):
                return f"{where}: {len(value)} items; the API takes at most {schema['maxItems']} here"
            for index, item in enumerate(value):
                problem = self._item_problem(item, schema.get("items", {}), f"{where}[{index}]", given)
                if problem:
                    return problem
            return None
        return scalar_problem(value, schema, where) or self._id_problem(value, schema, where)

    def _id_problem(self, value: Any, schema: dict[str, Any], where: str) -> str | None:
        """An id (or a full name's id part) against the rule its description states, wherever in
        the request it stands: a dataset's id in a query's `defaultDataset` as much as in a create."""
        rule = schema.get("idRule")
        if rule is None or not isinstance(value, str) or value == "":
            return None
        # a full name's rule is of its last segment (Cloud Tasks' "`TASK_ID` can contain …")
        identifier = value.rsplit("/", 1)[-1] if where.endswith(".name") and not schema.get("clientNamed") else value
        if re.fullmatch(rule["pattern"], identifier):
            return None
        shown = f"the id {identifier!r} in {value!r}" if identifier != value else repr(value)
        return f"{where}: {shown} is not an id {self.api} takes: {rule['words']}"

    def _item_problem(self, value: Any, schema: dict[str, Any], where: str, given: frozenset[str]) -> str | None:
        """A list item or map value: null is no value there (proto3's JSON refuses it)."""
        if value is None and self.resolve(schema).get("type") != "any":
            return f"{where}: is empty (null); {_null_hint(self.resolve(schema))}"
        return self.value_problem(value, schema, where, given)

    def _object_problem(
        self, value: Any, schema: dict[str, Any], where: str, kind_name: str, given: frozenset[str]
    ) -> str | None:
        if not isinstance(value, dict):
            return f"{where}: expected an object ({kind_name}), got {_shown(value)}"
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where}: the key {key!r} is {kind_of(key)}, not text: quote it ('{key}')"
            if properties is not None and key in properties:
                problem = self._field_problem(item, properties[key], f"{where}.{key}", kind_name, given)
                problem = problem or _control_problem(key, item, f"{where}.{key}")
            elif extra is not None:
                problem = None if key == "@type" else self._item_problem(item, extra, f"{where}.{key}", given)
                if CONTROL_CHARACTER.search(key) and where.rsplit(".", 1)[-1] not in LABEL_FIELDS:
                    problem = problem or f"{where}: the key {key!r} holds a control character (a newline?); no key does"
            else:
                return _unknown_field(where, kind_name, key, properties or {})
            if problem:
                return problem
        if where.rsplit(".", 1)[-1] in LABEL_FIELDS:
            longest = schema.get("maxLabelLength", MAX_LABEL_CHARACTERS)
            problem = _labels_problem(value, extra, where, schema.get("maxLabels", MAX_LABELS), longest)
            reserved = [key for key in value for prefix in schema.get("reservedPrefixes", ()) if key.startswith(prefix)]
            if reserved and problem is None:
                prefixes = " or ".join(repr(prefix) for prefix in schema["reservedPrefixes"])
                problem = f"{where}: label {reserved[0]!r}: keys starting with {prefixes} are reserved by the API"
            if problem:
                return problem
        given = given | self._not_required(kind_name)
        required = _required_problem(value, properties or {}, where, kind_name, given)
        for group in schema.get("oneOfRequired") or []:
            if required is None and not any(value.get(name) is not None or name in given for name in group):
                required = f"{where}: {kind_name} needs one of {', '.join(group)} (the API refuses it without)"
        return required or _exclusive_problem(value, schema.get("exclusive") or [], where, kind_name)

    def _not_required(self, kind_name: str) -> frozenset[str]:
        return frozenset(field for (api, schema, field) in NOT_REQUIRED if api == self.api and schema == kind_name)

    def _field_problem(
        self, item: Any, field: dict[str, Any], where: str, kind_name: str, given: frozenset[str]
    ) -> str | None:
        if field.get("readOnly") and item is not None:
            return f"{where}: output only in {kind_name}; a request cannot set it"
        if item is None:
            resolved = self.resolve(field)
            if resolved.get("type") in ("object", "array") or "properties" in resolved:
                # An empty YAML key (`environment:` with its children commented out) is null.
                return f"{where}: is empty (null); {_null_hint(resolved)}"
            return None  # proto3: a null scalar is the field's default
        return self.value_problem(item, field, where, given)


def _control_problem(name: str, value: Any, where: str) -> str | None:
    """A control character (such as the newline a YAML `|` block ends with) in a field that names or
    locates something (`_IDENTIFYING`); free text (scripts, args, descriptions) may hold them."""
    words = re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", name)
    if not words or (words[-1].lower().removesuffix("s") not in _IDENTIFYING and not name.endswith("kmsKey")):
        return None
    if len(words) > 1 and words[-2].lower() in _FREE_TEXT_NAMES:
        return None
    for text in value if isinstance(value, list) else [value]:
        if isinstance(text, str) and CONTROL_CHARACTER.search(text):
            return f"{where}: {text!r} holds a control character (a newline?); no URI, path, email, name or id does"
    return None


def _null_hint(schema: dict[str, Any]) -> str:
    kind = {"array": "a list", "object": "an object"}.get(schema.get("type") or "", "a value")
    kind = "an object" if "properties" in schema else kind
    return f"{kind} is needed here: give it a value (an empty key in YAML is null) or remove the key"


def _unknown_field(where: str, kind_name: str, key: str, properties: dict[str, Any]) -> str:
    settable = sorted(name for name, field in properties.items() if not field.get("readOnly"))
    close = difflib.get_close_matches(key, settable, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"{where}: {kind_name} has no field {key!r} (it has: {', '.join(settable) or 'none'}{hint})"


def _required_problem(
    value: dict[str, Any], properties: dict[str, Any], where: str, kind_name: str, given: frozenset[str]
) -> str | None:
    """A field the document marks "Required." that the object leaves out, sets to null, or leaves
    empty (`_is_empty`: AIP-203 asks a required field for a non-empty value). An identifier of the
    request itself (`name`, `parent`, `…Id` at the top of the body) is not asked for: the call's path,
    the API or runonce may supply it (Cloud Build's triggers.run names the trigger in its path, not in
    the body's triggerId); nor is a `projectId` anywhere (the call's project is the default). One
    deeper down names what the request refers to, and is asked for (a destination table's `tableId`,
    an env var's `name`)."""
    top = "." not in where
    for name, field in properties.items():
        identifier = name == "projectId" or (top and (name in ("name", "parent") or name.endswith("Id")))
        if field.get("required") and name not in given and not identifier:
            if value.get(name) is None:
                return f"{where}.{name}: required by {kind_name} (the API refuses the request without it)"
            if _is_empty(value[name], field):
                return f"{where}.{name}: required by {kind_name}, and {value[name]!r} is empty (the API refuses it)"
    return None


def _is_empty(value: Any, field: dict[str, Any]) -> bool:
    """An empty string, list or map. An empty message (`{}` where the schema has properties, or a
    `google.protobuf.Value`) is a value: proto3 keeps a message field's presence."""
    if "additionalProperties" in field:
        return bool(value == {})
    return (field.get("type"), value) in (("string", ""), ("array", []))


def _exclusive_problem(value: dict[str, Any], groups: list[list[str]], where: str, kind_name: str) -> str | None:
    for group in groups:
        given = [name for name in group if value.get(name) is not None]
        if len(given) > 1:
            return f"{where}: {' and '.join(given)} are both set; {kind_name} takes only one of {', '.join(group)}"
    return None


def _labels_problem(
    labels: dict[str, Any], extra: dict[str, Any] | None, where: str, most: int, longest: int
) -> str | None:
    """A `labels` map of text (every Google API's labels): Google's label rule, keys and values at
    most `longest` characters (63, or what the description states), at most `most` labels (64, or
    fewer where the description says so)."""
    if extra is None or extra.get("type") != "string":
        return None
    for key, label in labels.items():
        problem = label_problem(key, label, longest)
        if problem:
            return f"{where}: {problem}"
    if len(labels) > most:
        return f"{where}: {len(labels)} labels; a resource holds at most {most} here"
    return None


def scalar_problem(value: Any, schema: dict[str, Any], where: str) -> str | None:
    """A string, integer, number or boolean field (or parameter), as proto3 JSON takes it."""
    kind, fmt = schema.get("type"), schema.get("format")
    if (kind == "string" and fmt in INTEGER_RANGES) or kind == "integer":
        return _integer_problem(value, fmt if fmt in INTEGER_RANGES else "int32", where) or _bound_problem(
            int(value), schema, where, ""
        )
    if kind == "string":
        if isinstance(value, (date, datetime)):
            return f"{where}: expected a string, got the date {value}: quote it (YAML reads an unquoted date as one)"
        if not isinstance(value, str) and "enum" in schema:
            named = ", ".join(schema["enum"])
            return f"{where}: expected one of {named} (an enum value by its name), got {_shown(value)}"
        if not isinstance(value, str):
            return f"{where}: expected a string, got {_shown(value)}"
        return _string_problem(value, schema, where)
    if kind == "number":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return json_problem(value, where) or _bound_problem(value, schema, where, "")
        if isinstance(value, str) and (_DECIMAL.fullmatch(value) or value in ("NaN", "Infinity", "-Infinity")):
            return _bound_problem(float(value), schema, where, "")
        return f"{where}: expected a number, got {_shown(value)}"
    if kind == "boolean":
        return None if isinstance(value, bool) else f"{where}: expected a boolean, got {_shown(value)}"
    return json_problem(value, where)  # "any" and untyped fields take any JSON


def _integer_problem(value: Any, fmt: str, where: str) -> str | None:
    """An integer as a number or a string of digits (proto3 JSON), within its format's range."""
    low, high = INTEGER_RANGES[fmt]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif (isinstance(value, float) and value.is_integer()) or (isinstance(value, str) and _DIGITS.fullmatch(value)):
        number = int(value)
    if number is None:
        kind = f"an {fmt} (an integer, or a string of digits)" if fmt.endswith("64") else "an integer"
        return f"{where}: expected {kind}, got {_shown(value)}"
    if not low <= number <= high:
        return f"{where}: {number} is outside the {fmt} range {low} to {high}"
    return None


def _string_problem(value: str, schema: dict[str, Any], where: str) -> str | None:
    fmt = schema.get("format")
    if fmt == "google-duration":
        if not _is_duration(value):
            return f"{where}: {value!r} is not a duration like '3.5s' (seconds, up to 9 decimals, then 's')"
        return _bound_problem(float(value[:-1]), schema, where, "s")
    if fmt == "google-datetime" and not _is_timestamp(value):
        if _is_timestamp(value.upper()):
            return f"{where}: {value!r}: write its T and Z in upper case (2026-01-31T12:00:00Z), as the API reads it"
        if _is_timestamp(re.sub(r"(T[0-9]{2}:[0-9]{2}):60", r"\1:59", value.upper())):
            return f"{where}: {value!r}: a leap second (:60), which a Google Timestamp does not hold; write :59"
        return f"{where}: {value!r} is not an RFC 3339 timestamp like 2026-01-31T12:00:00Z"
    if fmt == "byte" and not _BASE64.fullmatch(value):
        return f"{where}: {value!r} is not base64 (bytes are sent as base64 text)"
    if "enum" in schema and value not in schema["enum"]:
        return f"{where}: {value!r} is not one of {', '.join(schema['enum'])}"
    if "proseEnum" in schema and value.upper() not in schema["proseEnum"]:
        return f"{where}: {value!r} is not one of {', '.join(schema['proseEnum'])} (the values its description lists)"
    if value == "":
        return None  # proto3's default, the same on the wire as leaving the field out
    if len(value) > schema.get("maxLength", len(value)):
        return f"{where}: {len(value)} characters; its description allows at most {schema['maxLength']}"
    resource_id = value.rsplit("/", 1)[-1]
    if len(resource_id) > schema.get("maxIdLength", len(resource_id)):
        return (
            f"{where}: the id {resource_id!r} is {len(resource_id)} characters; its description allows at most "
            f"{schema['maxIdLength']}"
        )
    size = len(value.encode())
    if size > schema.get("maxBytes", size):
        return f"{where}: {size} bytes (UTF-8); its description allows at most {schema['maxBytes']}"
    if not value.startswith(tuple(schema.get("prefix", [""]))):
        return f"{where}: {value!r} does not start with {' or '.join(schema['prefix'])}, as its description requires"
    if "notPrefix" in schema and value.startswith(schema["notPrefix"]):
        return f"{where}: {value!r}: its description asks for a bucket's name, without {schema['notPrefix']}"
    if not value.endswith(schema.get("suffix", "")):
        return f"{where}: {value!r} does not end with {schema['suffix']}, as its description requires"
    return None


def json_problem(value: Any, where: str) -> str | None:
    """The first value under `where` that JSON has no form for (a YAML date, timestamp, !!binary or
    !!set, `.nan` or `.inf`, a key that is not text), named by its place; None when it all has one.
    An untyped field (`google.protobuf.Value`, a pipeline's parameter values) takes any JSON, and
    only JSON: a request holding anything else could never be sent."""
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return f"{where}: the key {key!r} is {kind_of(key)}, not text: quote it ('{key}')"
            problem = json_problem(item, f"{where}.{key}")
            if problem:
                return problem
        return None
    if isinstance(value, list):
        return next((found for i, item in enumerate(value) if (found := json_problem(item, f"{where}[{i}]"))), None)
    if isinstance(value, float) and not math.isfinite(value):
        return f"{where}: {value} has no JSON form; write it as text, 'NaN', 'Infinity' or '-Infinity' (proto3 JSON)"
    if isinstance(value, (str, int, float, bool, type(None))):
        return None
    kind = YAML_KINDS.get(type(value).__name__, f"a {type(value).__name__}")
    return f"{where}: {kind} has no JSON form (JSON holds {JSON_VALUES}); quote it to send it as text"


def _bound_problem(number: float, schema: dict[str, Any], where: str, unit: str) -> str | None:
    """A number (a duration in seconds, `unit` "s") past the bound its description states. A number's
    0 is proto3's default, the same on the wire as leaving it out (the API's default applies)."""
    if number == 0 and not unit:
        return None
    low, high = schema.get("minimum"), schema.get("maximum")
    shown = str(int(number)) if float(number).is_integer() else str(number)
    if low is not None and number < low:
        return f"{where}: {shown}{unit} is below {low}{unit}, the minimum its description states"
    if high is not None and number > high:
        return f"{where}: {shown}{unit} is above {high}{unit}, the maximum its description states"
    return None


def _is_duration(value: str) -> bool:
    match = _DURATION.fullmatch(value)
    return match is not None and int(match.group(2)) <= MAX_DURATION_SECONDS


def _is_timestamp(value: str) -> bool:
    """RFC 3339 as google.protobuf.Timestamp takes it: a real date and time, years 1-9999."""
    match = _DATETIME.fullmatch(value)
    if match is None:
        return False
    date, time, _fraction, offset = match.groups()
    try:
        datetime.fromisoformat(f"{date}T{time}{'+00:00' if offset == 'Z' else offset}")
    except ValueError:
        return False
    return True


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"
