"""Every diagnostic code stepc emits, each defined once with its one-line meaning.

Codes are stable: `E` for errors, `W` for warnings, grouped by hundreds (see the code
ranges of docs/diagnostics.md, whose headings `tests/test_codes.py` checks against
`MEANINGS`). Code that reports a problem names the constant, never the bare string.
"""

MEANINGS: dict[str, str] = {}  # code -> its one-line meaning (the docs' heading)


def _code(code: str, meaning: str) -> str:
    MEANINGS[code] = meaning
    return code


SYNTAX_ERROR = _code("E0001", "syntax error")
UNREADABLE_FILE = _code("E0002", "cannot read a file")
NOT_TEXT = _code("E0003", "not a text program")
IMPORT_CYCLE = _code("E0004", "import cycle")
UNREADABLE_GRAPH = _code("E0005", "a STeP IR graph stepc cannot read")
NESTED_TOO_DEEPLY = _code("E0006", "nested too deeply")
# A program file or an import stepc cannot read as a program's text: a usage error (exit 2)
UNREADABLE_INPUT = frozenset({UNREADABLE_FILE, NOT_TEXT, NESTED_TOO_DEEPLY})

UNDEFINED_NAME = _code("E0101", "undefined name")
UNKNOWN_OPERATOR = _code("E0102", "unknown operator")
UNKNOWN_FUNCTION = _code("E0103", "unknown function, initialiser or tensor source")
ALREADY_DEFINED = _code("E0104", "already defined")
UNKNOWN_TYPE_OR_ROLE = _code("E0105", "unknown element type or tensor role")
UNKNOWN_OVERRIDE = _code("E0106", "`-D` or `--bind` names nothing in the program")
BAD_INDEX = _code("E0107", "bad index")
UNASSIGNED_ELEMENT = _code("E0108", "array element never assigned")
TOP_LEVEL_ONLY = _code("E0109", "only allowed at the top level")
RETURN_OUTSIDE_GRAPH = _code("E0111", "`return` outside a graph")
RECURSIVE_GRAPH = _code("E0112", "recursive graph")
PROGRAM_TOO_LARGE = _code("E0114", "program too large")

MISSING_ARGUMENT = _code("E0201", "missing argument")
UNKNOWN_PARAMETER = _code("E0202", "unknown parameter")
MISPLACED_ARGUMENT = _code("E0203", "misplaced or repeated argument")
BAD_ARGUMENT = _code("E0204", "wrong kind or value of argument")
CONFLICTING_ARGUMENTS = _code("E0205", "conflicting arguments")
BAD_FUNCTION_ATTRIBUTE = _code("E0206", "invalid function attribute")
BINDING_MISMATCH = _code("E0207", "binding does not match the value")
NOTHING_TO_BIND = _code("E0208", "nothing to bind, or a value thrown away")

RANK_MISMATCH = _code("E0301", "rank mismatch")
SHAPE_MISMATCH = _code("E0302", "shape mismatch")
WRONG_ELEMENT_KIND = _code("E0303", "wrong element kind")
DTYPE_MISMATCH = _code("E0304", "element type mismatch")
WRONG_OPERAND_TYPE = _code("E0305", "wrong operand type")
SELECTOR_MISMATCH = _code("E0306", "selector mismatch")
FUNCTION_NOT_USABLE = _code("E0307", "function not usable here")
MATMUL_INNER_MISMATCH = _code("E0310", "matmul inner dimensions differ")
NOT_ELEMENTWISE = _code("E0311", "tiles cannot be combined element-wise")
TILE_DOES_NOT_FIT = _code("E0320", "tensor and tile shapes do not fit")
VIEW_LENGTHS_DIFFER = _code("E0321", "`stride` and `shape` lengths differ")
VIEW_OUT_OF_BOUNDS = _code("E0322", "view reads outside the tensor")
STORE_NOT_FILLED = _code("E0323", "store does not fill the tensor")
RANK_OUT_OF_RANGE = _code("E0330", "reduction or buffer rank out of range")
RAGGED_BUFFERED_DIM = _code("E0331", "ragged inner buffered dim")
AFFINE_DYNAMIC_BUFFER = _code("E0332", "affine Streamify of a dynamic buffer")
FLATTEN_RANGE = _code("E0340", "Flatten range")
RESHAPE_NON_STATIC = _code("E0341", "Reshape splits a non-static dim")
RESHAPE_CHUNK = _code("E0342", "Reshape chunk does not divide the dim")
RESHAPE_PADDING = _code("E0343", "Reshape may need padding")
EXPAND_NOT_SIZE_ONE = _code("E0344", "Expand needs size-1 dims")
MALFORMED_ASSUMPTION = _code("E0350", "malformed assumption")
FALSE_ASSUMPTION = _code("E0351", "false assumption")
ASSUMPTION_UNKNOWN_SYMBOL = _code("E0352", "assumption mentions an unknown symbol")
ANNOTATION_MISMATCH = _code("E0360", "annotation does not match")
FEEDBACK_TYPE_MISMATCH = _code("E0361", "feedback stream type mismatch")
CANNOT_NAME_DIM = _code("E0362", "cannot name a dim")

UNBOUND_DECLARED_STREAM = _code("E0401", "incomplete or unbound declared stream")
USED_BEFORE_BOUND = _code("E0402", "used before it is bound")
CYCLE_WITHOUT_FEEDBACK = _code("E0403", "cycle without a feedback stream")
TRACE_MISMATCH = _code("E0404", "trace does not fit its external stream")

NON_POSITIVE_DIM = _code("E0501", "non-positive tensor dim")
DIVISION_BY_ZERO = _code("E0502", "division by zero")
NOT_INTEGER = _code("E0503", "not integer arithmetic")

UNUSED_STREAM = _code("W0001", "stream never consumed")
UNUSED_PARAM = _code("W0002", "parameter never used")
EMPTY_PROGRAM = _code("W0003", "program calls no operator")

UNPROVEN_EQUALITY = _code("W0301", "equality cannot be proved")
