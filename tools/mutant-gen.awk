# awk -v from=A -v to=B -f tools/mutant-gen.awk transformer.cpp: one line per mutant of lines A..B:
#     line <TAB> operator <TAB> the mutated line
# The mistakes a student makes, one at a time: + <-> -, < <-> <=, > <-> >=, == <-> !=, && <-> ||,
# * -> /, a unary minus dropped, a term, factor or divisor dropped (a + b -> a), loop bounds one past
# the end (< n -> < n + 1) or one late (= 0 -> = 1), constants (0.5 -> 1.0, 2 -> 1, 1 -> 0, other
# decimals doubled, other integers + 1), a statement dropped, the two indices of X(i, j) swapped;
# never inside a string literal.
function emit(op, newcode) { if (newcode != code) printf "%d\t%s\t%s%s\n", FNR, op, newcode, comment }
# every occurrence of s (outside string literals, and not next to one) replaced by r, one mutant each
function each(s, r, op,    off, p, pos) {
    off = 0
    while ((p = index(substr(mask, off + 1), s)) > 0) {
        pos = off + p
        off = pos
        if (substr(mask, pos - 1, 1) == "#" || substr(mask, pos + length(s), 1) == "#") continue  # joins strings
        emit(op, substr(code, 1, pos - 1) r substr(code, pos + length(s)))
    }
}
function isid(c) { return c ~ /[A-Za-z0-9_.]/ }
# the end (one past) of the operand that starts at p: up to a ) ] } ; , of its own level, or the next
# binary operator of its level (for a term: one of lower precedence than * and /; for a factor: any)
function operand_end(p, factor,    d, q, c, rest) {
    d = 0
    for (q = p; q <= length(mask); q++) {
        c = substr(mask, q, 1)
        if (c ~ /[(\[{]/) d++
        else if (c ~ /[)\]}]/) { if (d == 0) return q; d-- }
        else if (d == 0 && (c == ";" || c == ",")) return q
        else if (d == 0 && c == " ") {
            rest = substr(mask, q, 4)
            if (rest ~ /^ ([-+?:<>]|[<>=!]=|&&|\|\|) /) return q
            if (factor && rest ~ /^ [*\/%] /) return q
        }
    }
    return q
}
# every binary s (" + ", " - ", " * ", " / ") with the operand after it dropped: a + b -> a
function drop_operand(s, op, factor,    off, p, pos, e) {
    off = 0
    while ((p = index(substr(mask, off + 1), s)) > 0) {
        pos = off + p
        off = pos
        if (substr(mask, pos - 1, 1) == "#" || substr(mask, pos + length(s), 1) == "#") continue  # joins strings
        if (substr(mask, 1, pos) ~ /(^|[^A-Za-z0-9_])throw /) continue  # builds an error message
        e = operand_end(pos + length(s), factor)
        if (e > pos + length(s)) emit(op, substr(code, 1, pos - 1) substr(code, e))
    }
}
# a unary minus dropped: -x -> x (after ( = , ? : return, not --, -=, ->)
function unary_minus(    i, c, before) {
    for (i = 1; i <= length(mask); i++) {
        if (substr(mask, i, 1) != "-") continue
        c = substr(mask, i + 1, 1)
        if (c == "" || c ~ /[- =>]/) continue
        before = substr(mask, 1, i - 1); sub(/[ \t]+$/, "", before)
        if (before ~ /[(=,?:]$/ || before ~ /(^|[^A-Za-z0-9_])return$/ || before == "")
            emit("unary - dropped", substr(code, 1, i - 1) substr(code, i + 1))
    }
}
function constants(    i, j, c, t, r, e) {
    for (i = 1; i <= length(mask); i++) {
        c = substr(mask, i, 1)
        if (c !~ /[0-9]/ || (i > 1 && isid(substr(mask, i - 1, 1)))) continue
        j = i
        while (j <= length(mask) && substr(mask, j, 1) ~ /[0-9.]/) j++
        t = substr(mask, i, j - i)
        e = j
        while (e <= length(mask) && substr(mask, e, 1) ~ /[A-Za-z_0-9]/) e++
        if (substr(mask, j, e - j) !~ /^(f|L|LL|u|U|ul|UL|ULL)?$/) { i = e; continue }  # 1e-5 and the like
        r = ""
        if (t + 0 == 0.5 && t ~ /\./) r = "1.0"
        else if (t == "2") r = "1"
        else if (t == "2.0") r = "1.0"
        else if (t == "1") r = "0"
        else if (t == "1.0") r = "0.0"
        else if (t ~ /\./ && t + 0 != 0 && t + 0 != 1) r = sprintf("%.6g", 2 * t) (sprintf("%.6g", 2 * t) ~ /\./ ? "" : ".0")
        else if (t ~ /^[0-9]+$/ && t + 0 > 2) r = t + 1
        if (r != "") emit("constant " t " -> " r, substr(code, 1, i - 1) r substr(code, j))
        i = e
    }
}
function swaps(    rest, off, m, pre, inner, a, b, nm, k, start) {
    off = 0
    while (match(substr(mask, off + 1), /[A-Za-z_][A-Za-z0-9_]*\([^(),]+, [^(),]+\)/)) {
        start = off + RSTART
        m = substr(mask, start, RLENGTH)
        off = start + RLENGTH - 1
        pre = start > 1 ? substr(mask, start - 1, 1) : " "
        k = index(m, "(")
        nm = substr(m, 1, k - 1)
        if (pre == ":" || pre == ">" || nm ~ /^(max|min|pow|swap|fmax|fmin|if|for|while|switch|return)$/) continue
        inner = substr(m, k + 1, length(m) - k - 1)
        a = substr(inner, 1, index(inner, ", ") - 1); b = substr(inner, index(inner, ", ") + 2)
        if (a == b || a ~ /[\[\]"]/ || b ~ /[\[\]"]/) continue
        emit("indices swapped", substr(code, 1, start + k - 1) b ", " a substr(code, start + length(m) - 1))
    }
}
function droppable(t) {
    if (t !~ /;$/ || t ~ /^(return|throw|for|if|else|break|continue|case|default)\b/) return 0
    if (t ~ /^(const |static |constexpr )*[A-Za-z_][A-Za-z0-9_:<>,]*[*&]* +[*&]*[A-Za-z_][A-Za-z0-9_]* *(=|\(|\{|;)/) return 0
    if (gsub(/\(/, "(", t) != gsub(/\)/, ")", t)) return 0
    return t ~ /[^=!<>]=[^=]/ || t ~ /^[A-Za-z_][A-Za-z0-9_:.]*(<[^;]*>)?\(/
}
FNR >= from && FNR <= to {
    code = $0; comment = ""
    mask = ""; inq = 0
    for (i = 1; i <= length(code); i++) {  # code with string literals blanked, and the // comment split off
        c = substr(code, i, 1)
        if (!inq && substr(code, i, 2) == "//") { comment = substr(code, i); code = substr(code, 1, i - 1); break }
        if (c == "\"" && substr(code, i - 1, 1) != "\\") inq = !inq
        mask = mask (inq || c == "\"" ? "#" : c)
    }
    t = code; gsub(/^[ \t]+|[ \t]+$/, "", t)
    if (t == "") { prev = prev; next }
    each(" + ", " - ", "+ -> -"); each(" - ", " + ", "- -> +")
    each(" += ", " -= ", "+= -> -="); each(" -= ", " += ", "-= -> +=")
    each(" < ", " <= ", "< -> <="); each(" <= ", " < ", "<= -> <")
    each(" > ", " >= ", "> -> >="); each(" >= ", " > ", ">= -> >")
    each(" * ", " / ", "* -> /"); each(" *= ", " /= ", "*= -> /=")
    each(" == ", " != ", "== -> !="); each(" != ", " == ", "!= -> ==")
    each(" && ", " || ", "&& -> ||"); each(" || ", " && ", "|| -> &&")
    drop_operand(" + ", "term dropped", 0); drop_operand(" - ", "term dropped", 0)
    drop_operand(" * ", "factor dropped", 1); drop_operand(" / ", "divisor dropped", 1)
    unary_minus()
    if (mask ~ /for \(/) {
        each(" = 0;", " = 1;", "loop start 0 -> 1")
        if (match(mask, / < [^;]+;/)) emit("loop bound one past the end", substr(code, 1, RSTART + RLENGTH - 2) " + 1" substr(code, RSTART + RLENGTH - 1))
    }
    constants()
    swaps()
    if (droppable(t) && (prev ~ /[;{})]$/ || prev ~ /else$/)) {
        ind = code; sub(/[^ \t].*/, "", ind)
        emit("statement dropped", ind ";")
    }
    prev = t
}
