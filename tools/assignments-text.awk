# ---- make assignments-text-check: each assignment's text against its graded cases --------------
# awk -v assignments="1 2 ..." -v funcs="1:f g;2:h;..." -v tests=tests.cpp -v sheet=docs/formulas.md
# -v doc=docs/assignments.md [-v totals="1:10 ..."] [-v logs="1:FILE ..."], over those three files:
# for each assignment N, its graded cases (those of tests.cpp whose doctest test suite is
# "assignment N" or "assignment N (...)") against the section "## Assignment N: ..." of doc.
# - Every § a case needs is in the section's Read paragraph (the lines from "Read " to a blank
#   line): each "§N" (or range "§N-§M") in the source text of the case (its TEST_CASE line and body)
#   and of the helpers of tests.cpp it calls, and those they call; and each § under which the code
#   map of the formula sheet (§33, rows "| [§N](#sN) ... | ... | `case name` ... |", names matched
#   as doctest matches -tc) lists the case. The table row "| N | ..." of doc reads the same sections.
# - Every function of ASSIGNMENT_N_FUNCS whose argument checks a case grades is named (as
#   `name` before the item's first ": ") in an item "- ..." of the section's list after the line
#   "Rules ...": one that a throw check of the case or its helpers calls (M_CHECK_TF_ERROR,
#   CHECK_THROWS*, REQUIRE_THROWS*: a name followed by "(" or "<" in its arguments, string
#   literals and comments left out), or, given the fresh handout's output in logs, whose stub a
#   throw check there reached ("not implemented: NAME" on a failed THROWS line or a logged
#   "message:" line).
# - With totals, the case count of this scan is the one ./tests lists.
# The scan reads the text: a helper is a function or macro defined from column 0 with its body up
# to a "}" in column 0 (a comment above it is not its text); a call is a name followed by "(" or
# "<", so a lambda defined before the check that calls it, a helper passed by name, a raw string
# literal's parentheses or a function of transformer.cpp that calls the assignment's are not seen
# through (the fresh handout's run covers the stubs a throw check reaches). Prints a line per
# assignment that agrees, one per missing § or rule otherwise; exits 1 then.
function add(unit, line) { text[unit] = (unit in text) ? text[unit] "\n" line : line }
# s without its string and character literals and its comments
function code_of(s,    out, i, n, c, q) {
    out = ""; n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (c == "/" && substr(s, i + 1, 1) == "/") { while (i <= n && substr(s, i, 1) != "\n") i++; out = out "\n"; continue }
        if (c == "/" && substr(s, i + 1, 1) == "*") { i += 2; while (i <= n && substr(s, i, 2) != "*/") i++; i++; continue }
        if (c == "\"" || c == "'") {
            q = c
            for (i++; i <= n && substr(s, i, 1) != q; i++) if (substr(s, i, 1) == "\\") i++
            continue
        }
        out = out c
    }
    return out
}
# the names in s (code) followed by "(" or "<", as " name1 name2 ... "
function called(s,    out, rest, nm) {
    out = " "; rest = s
    while (match(rest, /[A-Za-z_][A-Za-z0-9_]*[ \t]*[(<]/)) {
        nm = substr(rest, RSTART, RLENGTH); sub(/[ \t]*[(<]$/, "", nm)
        if (RSTART == 1 || substr(rest, RSTART - 1, 1) !~ /[A-Za-z0-9_]/) out = out nm " "
        rest = substr(rest, RSTART + RLENGTH)
    }
    return out
}
# the argument texts of the throw checks in s (code), each followed by "\001"
function throw_args(s,    out, rest, p, d, c, start) {
    out = ""; rest = s
    while (match(rest, /(M_CHECK_TF_ERROR|(CHECK|REQUIRE|WARN)_THROWS[A-Z_]*)[ \t]*\(/)) {
        if (RSTART > 1 && substr(rest, RSTART - 1, 1) ~ /[A-Za-z0-9_]/) { rest = substr(rest, RSTART + RLENGTH); continue }
        start = RSTART + RLENGTH; d = 1
        for (p = start; p <= length(rest) && d > 0; p++) {
            c = substr(rest, p, 1)
            if (c == "(") d++
            else if (c == ")") d--
        }
        out = out substr(rest, start, p - 1 - start) "\001"
        rest = substr(rest, p)
    }
    return out
}
# the sections s cites, "§N" or a range "§N-§M", as " N M ... "
function sections(s,    out, rest, t, a, b, k) {
    out = " "; rest = s
    while (match(rest, /§[0-9]+(-§[0-9]+)?/)) {
        t = substr(rest, RSTART, RLENGTH); rest = substr(rest, RSTART + RLENGTH)
        gsub(/[^0-9-]/, "", t); a = t; sub(/-.*/, "", a); b = t; sub(/.*-/, "", b)
        for (k = a + 0; k <= b + 0 && k <= a + 99; k++) out = out k " "
    }
    return out
}
# doctest's wildcard match: * any run, ? one character (s and p in lower case)
function wild(s, p,    si, pi, ns, np, star, mark) {
    si = 1; pi = 1; ns = length(s); np = length(p); star = 0
    while (si <= ns) {
        if (pi <= np && substr(p, pi, 1) == "*") { star = ++pi; mark = si; continue }
        if (pi <= np && (substr(p, pi, 1) == "?" || substr(p, pi, 1) == substr(s, si, 1))) { pi++; si++; continue }
        if (!star) return 0
        pi = star; si = ++mark
    }
    while (pi <= np && substr(p, pi, 1) == "*") pi++
    return pi > np
}
function where(a) { return doc ", section \"Assignment " a "\"" }
BEGIN {
    n_assign = split(assignments, A, " ")
    nf = split(funcs, F, ";")
    for (k = 1; k <= nf; k++) {
        if (F[k] !~ /:/) continue
        c = index(F[k], ":"); a = substr(F[k], 1, c - 1); gsub(/ /, "", a); blanked[a] = " " substr(F[k], c + 1) " "
    }
    nt = split(totals, T, " ")
    for (k = 1; k <= nt; k++) { c = index(T[k], ":"); total[substr(T[k], 1, c - 1)] = substr(T[k], c + 1) }
    nl = split(logs, L, " ")
    for (k = 1; k <= nl; k++) { c = index(L[k], ":"); log_of[substr(L[k], 1, c - 1)] = substr(L[k], c + 1) }
    state = ""
}
# ---- tests.cpp: the test cases and the helpers (functions and macros defined in column 0)
FILENAME == tests && state == "body" { add(unit, $0); if ($0 ~ /^}/) state = ""; next }
FILENAME == tests && state == "macro" { add(unit, $0); if ($0 !~ /\\$/) state = ""; next }
FILENAME == tests && state == "sig" {
    add(unit, $0)
    if ($0 ~ /\{/) state = ($0 ~ /}[ \t]*$/ && $0 !~ /\{[ \t]*$/) ? "" : "body"
    else if ($0 ~ /;[ \t]*$/) { delete text[unit]; delete helper[nm]; state = "" }
    next
}
FILENAME == tests && /^TEST_CASE\(/ {
    ncase++; unit = "case " ncase
    match($0, /^TEST_CASE\("([^"\\]|\\.)*"/); nm = substr($0, 12, RLENGTH - 12)
    gsub(/\\"/, "\"", nm); gsub(/\\\\/, "\\", nm)
    case_name[ncase] = nm; case_line[ncase] = FNR; suite = ""
    if (match($0, /doctest::test_suite\("[^"]*"\)/)) suite = substr($0, RSTART + 21, RLENGTH - 23)
    if (suite ~ /^assignment [0-9]+( \(.*\))?$/) {
        a = suite; sub(/^assignment /, "", a); sub(/ .*/, "", a)
        case_of[a] = case_of[a] " " ncase; ncases[a]++
    }
    add(unit, $0)
    state = ($0 ~ /\{[ \t]*$/) ? "body" : ""
    next
}
FILENAME == tests && /^#define [A-Za-z_][A-Za-z0-9_]*\(/ {
    nm = $2; sub(/\(.*/, "", nm); unit = "helper " nm; helper[nm] = 1
    add(unit, $0); if ($0 ~ /\\$/) state = "macro"
    next
}
FILENAME == tests && /^[A-Za-z_]/ && !/^(namespace|struct|class|union|enum|using|typedef|static_assert|template|extern)[^A-Za-z0-9_]/ {
    if (!match($0, /[A-Za-z_][A-Za-z0-9_]*\(/)) next
    nm = substr($0, RSTART, RLENGTH - 1)
    if (nm ~ /^(if|for|while|switch|return|sizeof|decltype|alignof|operator)$/) next
    unit = "helper " nm
    if ($0 ~ /\{/) {
        helper[nm] = 1; add(unit, $0)
        state = ($0 ~ /}[ \t]*;?[ \t]*$/ && $0 !~ /\{[ \t]*$/) ? "" : "body"
    } else if ($0 !~ /;[ \t]*$/) { helper[nm] = 1; add(unit, $0); state = "sig" }
    next
}
FILENAME == tests { next }
# ---- docs/formulas.md: the code map's rows "| [§N](#sN) title | functions | test cases |"
FILENAME == sheet && /^\| \[§[0-9]+\]/ {
    s = $0; sub(/^\| \[§/, "", s); sub(/[^0-9].*/, "", s)
    cell = $0; sub(/[ \t]*\|[ \t]*$/, "", cell)
    while ((p = index(cell, " | ")) > 0) cell = substr(cell, p + 3)
    while (match(cell, /`[^`]+`/)) { nmap++; map_sec[nmap] = s; map_pat[nmap] = tolower(substr(cell, RSTART + 1, RLENGTH - 2)); cell = substr(cell, RSTART + RLENGTH) }
    next
}
FILENAME == sheet { next }
# ---- docs/assignments.md: the table's rows, and each section's Read paragraph and Rules list
FILENAME == doc && /^\| [0-9]+ \|/ {
    a = $0; sub(/^\| /, "", a); sub(/ .*/, "", a); nc = split($0, cells, "|"); row_reads[a] = sections(cells[4])
    next
}
FILENAME == doc && /^## / { sec = ""; part = ""; if (match($0, /^## Assignment [0-9]+:/)) { sec = substr($0, 15, RLENGTH - 15); seen_sec[sec] = 1 }; next }
FILENAME == doc && sec == "" { next }
FILENAME == doc && part == "rules-head" { if ($0 ~ /^[ \t]*$/) { part = "rules"; next }; if ($0 !~ /^- /) next; part = "rules" }
FILENAME == doc && part == "rules" && ($0 ~ /^[ \t]*$/ || $0 ~ /^  /) { next }  # between items, an item's next lines
FILENAME == doc && part == "rules" && !/^- / { part = "" }
FILENAME == doc && /^[ \t]*$/ { part = ""; next }
FILENAME == doc && /^Read / { part = "read" }
FILENAME == doc && /^Rules/ { part = "rules-head"; seen_rules[sec] = 1; next }
FILENAME == doc && part == "read" {
    ns = split(sections($0), S, " ")
    for (k = 1; k <= ns; k++) { reads[sec, S[k]] = 1; read_list[sec] = read_list[sec] " " S[k] }
    next
}
FILENAME == doc && part == "rules" && /^- / {
    item = $0; sub(/^- /, "", item)
    head = ""; inq = 0  # the names before the item's first ": " outside backquotes
    for (i = 1; i <= length(item); i++) {
        c = substr(item, i, 1); if (c == "`") inq = !inq
        if (!inq && substr(item, i, 2) == ": ") break
        head = head c
    }
    while (match(head, /`[A-Za-z_][A-Za-z0-9_:]*`/)) { rules[sec, substr(head, RSTART + 1, RLENGTH - 2)] = 1; head = substr(head, RSTART + RLENGTH) }
    next
}
function fail(msg) { print msg; fails++ }
function need_read(a, s, i, why) {
    cited[s] = 1
    if ((a, s) in reads || (a, s, i) in told) return
    told[a, s, i] = 1
    fail("assignment " a ": the case \"" case_name[i] "\" (tests.cpp:" case_line[i] ") " why " §" s ", which the Read list of " where(a) " lacks")
}
function need_rule(a, f, i, why) {
    graded[f] = 1
    if ((a, f) in rules || (a, f, i) in told) return
    told[a, f, i] = 1
    fail("assignment " a ": the case \"" case_name[i] "\" (tests.cpp:" case_line[i] ") grades the argument checks of " f " (" why "), which the Rules list of " where(a) " does not name")
}
END {
    bad = 0
    for (k = 1; k <= n_assign; k++) {
        a = A[k]; fails = 0
        split("", cited); split("", graded); split("", by_name); nb = split(blanked[a], B, " ")
        if (!(a in seen_sec)) { print "assignment " a ": " doc " has no section \"## Assignment " a ": ...\""; bad = 1; continue }
        if (!(a in ncases)) { print "assignment " a ": no test case of " tests " is in the test suite \"assignment " a "\""; bad = 1; continue }
        if (!(a in seen_rules)) fail("assignment " a ": " where(a) " has no Rules list (a line \"Rules ...\", then \"- `function`: ...\" items)")
        if ((a in total) && total[a] != ncases[a])
            fail("assignment " a ": tests.cpp holds " ncases[a] " cases of its test suites as this scan reads them, the tests list " total[a])
        m = split(case_of[a], C, " ")
        for (j = 1; j <= m; j++) {
            i = C[j]; by_name[case_name[i]] = i
            # the case, and the helpers of tests.cpp it calls, and those they call
            split("", use); list = ""; todo = called(code_of(text["case " i]))
            while (todo ~ /[^ ]/) {
                sub(/^ +/, "", todo); h = todo; sub(/ .*/, "", h); todo = substr(todo, length(h) + 1)
                if (!(h in helper) || (h in use)) continue
                use[h] = 1; list = list " " h; todo = todo called(code_of(text["helper " h]))
            }
            src = text["case " i]; hn = split(list, H, " ")
            for (q = 1; q <= hn; q++) src = src "\n" text["helper " H[q]]
            ns = split(sections(src), S, " ")
            for (q = 1; q <= ns; q++) need_read(a, S[q], i, "cites")
            lc = tolower(case_name[i])
            for (q = 1; q <= nmap; q++) if (wild(lc, map_pat[q])) need_read(a, map_sec[q], i, "is listed in the code map of " sheet " (§33) under")
            na = split(throw_args(code_of(src)), TA, "\001"); nb = split(blanked[a], B, " ")
            for (t = 1; t <= na; t++) {
                cl = called(TA[t])
                for (b = 1; b <= nb; b++) if (index(cl, " " B[b] " ")) need_rule(a, B[b], i, "a throw check calls it")
            }
        }
        # the fresh handout's run: a throw check whose exception is the stub of this assignment's function
        if (a in log_of) {
            lf = log_of[a]; cur = ""
            while ((getline line < lf) > 0) {
                if (line ~ /^TEST CASE: /) { cur = line; sub(/^TEST CASE: +/, "", cur); continue }
                if (!(line ~ /(CHECK|REQUIRE|WARN)_THROWS.*not implemented: / || line ~ /message: .*not implemented: /)) continue
                f = line; sub(/.*not implemented: /, "", f); sub(/[^A-Za-z0-9_].*/, "", f)
                if (!(cur in by_name) || index(blanked[a], " " f " ") == 0) continue
                need_rule(a, f, by_name[cur], "in the fresh handout a throw check reaches its stub")
            }
            close(lf)
        }
        # the table's read column and the Read list name the same sections
        split("", in_row); split("", in_list); nr = split(row_reads[a], R, " "); nq = split(read_list[a], Q, " ")
        for (q = 1; q <= nr; q++) in_row[R[q]] = 1
        for (q = 1; q <= nq; q++) in_list[Q[q]] = 1
        for (q = 1; q <= nr; q++) if (!(R[q] in in_list)) fail("assignment " a ": the table of " doc " reads §" R[q] ", the section's Read list does not")
        for (q = 1; q <= nq; q++) if (!(Q[q] in in_row)) fail("assignment " a ": the Read list of " where(a) " reads §" Q[q] ", the table's row does not")
        out = ""
        for (s = 1; s <= 99; s++) if (s in cited) out = out " §" s
        rl = ""
        for (b = 1; b <= nb; b++) if (B[b] in graded) rl = rl (rl == "" ? "" : ", ") B[b]
        if (fails) bad = 1
        else printf("assignment %s: %d cases, reads%s, rules: %s: text and cases agree\n", a, ncases[a], out == "" ? " nothing" : out, rl == "" ? "none" : rl)
    }
    exit bad
}
