# awk -v funcs="A B" [-v labels="A=assignment+N ..."] [-v ranges=FILE] -f tools/blank.awk transformer.cpp:
# the file with the bodies of A and B replaced by a stub; exit 1 if a name has no body. A definition
# is found by its name followed by "(" on a line starting in column 0 (the signature may go on for
# up to 12 lines, the body's "{" anywhere after the parameter list); its body ends where the braces
# counted from that "{" close. ranges: "NAME FIRST LAST" per name, the body's lines strictly
# between the line of its "{" and the line of its "}" (make mutants mutates those).
function pname(p,    nm) {  # the name of one parameter declaration, "" if it has none
    sub(/=.*/, "", p); gsub(/^[ \t]+|[ \t]+$/, "", p)
    if (!match(p, /[A-Za-z_][A-Za-z0-9_]*$/) || RSTART == 1) return ""
    nm = substr(p, RSTART, RLENGTH)
    return (nm in keyword) ? "" : nm
}
function pnames(s,    i, c, depth, cur, out, nm) {  # the names in a parameter list
    depth = 0; cur = ""; out = ""
    for (i = 1; i <= length(s); i++) {
        c = substr(s, i, 1)
        if (c == "(" || c == "<" || c == "[") depth++
        if (c == ")" || c == ">" || c == "]") depth--
        if (c == "," && depth == 0) {
            if ((nm = pname(cur)) != "") out = out " " nm
            cur = ""
        } else cur = cur c
    }
    if ((nm = pname(cur)) != "") out = out " " nm
    return out
}
function candidate(line,    k, p, before) {  # a wanted name followed by "(" in this line, or ""
    for (k = 1; k <= nwant; k++) {
        p = index(line, want[k] "(")
        if (p == 0) continue
        before = p == 1 ? " " : substr(line, p - 1, 1)
        if (before == " " || before == "*" || before == "&") return want[k]
    }
    return ""
}
# sig: the signature so far, from its first line. Returns 0 (not complete yet), 1 (a declaration or
# not a function), 2 (a definition whose "{" ends the last line).
function decide(    p, i, c, depth, rest, names, line, k, n) {
    p = index(sig, name "(") + length(name) + 1
    depth = 1
    for (i = p; i <= length(sig) && depth > 0; i++) {
        c = substr(sig, i, 1)
        if (c == "(") depth++
        if (c == ")") depth--
    }
    if (depth > 0) return nlines > 12 ? 1 : 0
    rest = substr(sig, i)
    if (rest ~ /;/ && !(rest ~ /^[^;]*\{/)) return 1
    if (!(rest ~ /\{/)) return nlines > 12 ? 1 : 0
    open_at = i - 1 + index(rest, "{")  # the body's "{" in sig (and in buf: the same length)
    names = pnames(substr(sig, p, i - 1 - p)); n = split(names, arg, " ")
    stub = ""; line = "   "
    for (k = 1; k <= n; k++) {
        if (length(line) + length(arg[k]) > 100) { stub = stub line "\n"; line = "   " }
        line = line " (void)" arg[k] ";"
    }
    if (n > 0) stub = stub line "\n"
    stub = stub "    throw tf::NotImplemented(\"" name "\"" ((name in label) ? ", \"" label[name] "\"" : "") ");"
    return 2
}
BEGIN {
    nwant = split(funcs, want, " ")
    nl = split(labels, lab, " ")  # NAME=assignment+N: the stub of NAME says "(assignment N)"
    for (k = 1; k <= nl; k++) { eq = index(lab[k], "="); l = substr(lab[k], eq + 1); gsub(/\+/, " ", l); label[substr(lab[k], 1, eq - 1)] = l }
    nkw = split("const volatile unsigned signed int long short char bool float double void auto typename", kw, " ")
    for (k = 1; k <= nkw; k++) keyword[kw[k]] = 1
    state = 0
}
# The body is found by counting braces outside comments, string and character literals (a block
# comment may span lines): body_end(s) is the position in s where the body's depth returns to 0, or 0.
function body_end(s,    i, c, n) {
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        if (in_comment) { if (c == "*" && substr(s, i + 1, 1) == "/") { in_comment = 0; i++ }; continue }
        if (c == "/" && substr(s, i + 1, 1) == "/") return 0
        if (c == "/" && substr(s, i + 1, 1) == "*") { in_comment = 1; i++; continue }
        if (c == "\"" || (c == "'" && !(substr(s, i - 1, 1) ~ /[0-9A-Fa-f]/))) {  # a literal ('... after a digit: a separator)
            for (i++; i <= n && substr(s, i, 1) != c; i++) if (substr(s, i, 1) == "\\") i++
            continue
        }
        if (c == "{") depth++
        if (c == "}" && --depth == 0) return i
    }
    return 0
}
# After the stub: the rest of the line from the body's closing brace (it ends the body).
function ended(s, q) { print substr(s, q); if (!(name in to)) to[name] = NR - 1; state = 0 }
state == 2 { if ((q = body_end($0)) > 0) ended($0, q); next }
state == 1 || (state == 0 && /^[A-Za-z_]/ && (name = candidate($0)) != "") {
    if (state == 0) { buf = $0; sig = $0; nlines = 1; state = 1 }
    else { buf = buf "\n" $0; sig = sig " " $0; nlines++ }
    d = decide()
    if (d == 1) { print buf; state = 0 }
    if (d == 2) {
        print substr(buf, 1, open_at); print stub; blanked[name]++; if (!(name in from)) from[name] = NR + 1
        depth = 1; in_comment = 0; state = 2
        tail = substr(buf, open_at + 1)
        if ((q = body_end(tail)) > 0) ended(tail, q)
    }
    next
}
{ print }
END {
    if (failed) exit 1
    if (state != 0) {
        printf("make handout: %s: the body of %s has no closing brace\n", FILENAME, name) > "/dev/stderr"
        exit 1
    }
    for (k = 1; k <= nwant; k++)
        if (!(want[k] in blanked)) {
            printf("make handout: %s defines no function %s\n", FILENAME, want[k]) > "/dev/stderr"
            failed = 1
        }
    if (failed) exit 1
    if (ranges != "") for (k = 1; k <= nwant; k++) print want[k], from[want[k]], to[want[k]] > ranges
}
