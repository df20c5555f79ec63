# awk (environment: GRADE_TMP, GRADE_N, ...): the reports of the runner's files K.name, K.verdict,
# K.note, K.out, K.xml for the K-th case and "points" (POINTS<TAB>NAME of every case). results.json:
# {"score", "output", "tests": [{"name", "score", "max_score", "status", "output"}]}, strings
# escaped for JSON (a byte that is not UTF-8 becomes U+FFFD), a failed case's output its console
# text (its first 200 lines).
# results.xml: the <testcase> elements of every K.xml in one <testsuite>, an <error> for a case
# without a complete report. Prints one line per case and the score.
function num(x) { return sprintf("%.10g", x) }
function jbody(s,    out, i, n, c, b, need, lo, hi, ok, k, b2) {  # s escaped for a JSON string
    if (s !~ /[^ -~]/ && index(s, "\"") == 0 && index(s, "\\") == 0) return s
    out = ""; n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1); b = ord[c]
        if (c == "\"") out = out "\\\""
        else if (c == "\\") out = out "\\\\"
        else if (c == "\t") out = out "\\t"
        else if (c == "\r") out = out "\\r"
        else if (b < 32) out = out sprintf("\\u%04x", b)
        else if (b < 128) out = out c
        else {  # a UTF-8 sequence (Unicode's table of well-formed byte sequences), else U+FFFD
            need = (b >= 194 && b <= 223) ? 1 : (b >= 224 && b <= 239) ? 2 : (b >= 240 && b <= 244) ? 3 : 0
            lo = (b == 224) ? 160 : (b == 240) ? 144 : 128
            hi = (b == 237) ? 159 : (b == 244) ? 143 : 191
            ok = need > 0 && i + need <= n
            for (k = 1; ok && k <= need; k++) {
                b2 = ord[substr(s, i + k, 1)]
                if (b2 < (k == 1 ? lo : 128) || b2 > (k == 1 ? hi : 191)) ok = 0
            }
            if (ok) { out = out substr(s, i, need + 1); i += need }
            else out = out "\\ufffd"
        }
    }
    return out
}
function jstr(s) { return "\"" jbody(s) "\"" }
function jfile(f, from, maxl,    line, out, k, more, blank) {  # from, then the lines of f, as JSON text
    out = from; k = 0; more = 0; blank = 0
    while ((getline line < f) > 0) {
        if (line ~ /^\[doctest\] / || line ~ /^=====*$/) continue  # doctest's summary, its separators
        if (line == "") { blank++; continue }  # empty lines are kept between lines only
        if (k < maxl) {
            if (out != "") { for (; blank > 0; blank--) out = out "\\n"; out = out "\\n" }
            out = out jbody(line)
        } else more++
        blank = 0; k++
    }
    close(f)
    if (more) out = out "\\n... and " more " more lines (make check shows them all)"
    return out
}
function xesc(s) { gsub(/&/, "\\&amp;", s); gsub(/</, "\\&lt;", s); gsub(/>/, "\\&gt;", s); gsub(/"/, "\\&quot;", s); return s }
function xml_case(f, name, why,    line, part, lines, cnt, suite, t) {  # the <testcase> elements of f, or an <error>
    part = 0; lines = ""; cnt = 0
    while ((getline line < f) > 0) {
        if (part == 0 && line ~ /^  <testsuite /) { part = 1; suite = line; continue }
        if (part == 1 && line == "  </testsuite>") { part = 2; continue }
        if (part == 1) { lines = lines line "\n"; if (line ~ /^    <testcase /) cnt++ }
        if (part == 2 && line == "</testsuites>") part = 3
    }
    close(f)
    if (part == 3 && cnt > 0) {
        t = suite; if (match(t, / failures="[0-9]+"/)) xfail += substr(t, RSTART + 11, RLENGTH - 12)
        t = suite; if (match(t, / errors="[0-9]+"/)) xerr += substr(t, RSTART + 9, RLENGTH - 10)
        xcases += cnt
        return lines
    }
    xerr++; xcases++
    return "    <testcase classname=\"tests.cpp\" name=\"" xesc(name) "\" status=\"run\">\n" \
           "      <error message=\"" xesc(why) "\">" xesc(why) "</error>\n    </testcase>\n"
}
BEGIN {
    for (k = 1; k < 256; k++) ord[sprintf("%c", k)] = k
    tmp = ENVIRON["GRADE_TMP"]; n = ENVIRON["GRADE_N"] + 0; title = ENVIRON["GRADE_TITLE"]
    build_log = ENVIRON["GRADE_BUILD_LOG"]; json = ENVIRON["GRADE_JSON"]; xml = ENVIRON["GRADE_XML"]
    maxl = 200
    while ((getline line < (tmp "/points")) > 0) {  # POINTS<TAB>NAME: the points of each case, from its suite
        k = index(line, "\t"); pts[substr(line, k + 1)] = substr(line, 1, k - 1) + 0
    }
    close(tmp "/points")
    score = 0; total = 0; passed = 0; tests = ""; cases = ""; xfail = 0; xerr = 0; xcases = 0
    for (k = 1; k <= n; k++) {
        f = tmp "/" k
        name = ""; v = ""; note = ""
        getline name < (f ".name"); close(f ".name")
        getline v < (f ".verdict"); close(f ".verdict")
        getline note < (f ".note"); close(f ".note")
        if (!(name in pts)) { printf("make grade: the case \"%s\" is in no test suite that gives points\n", name) > "/dev/stderr"; exit 2 }
        max = pts[name]; ok = v == "passed"; got = ok ? max : 0
        score += got; total += max; passed += ok
        printf("  %5s/%-5s %s  %s\n", num(got), num(max), ok ? "passed" : "FAILED", name)
        tests = tests (k > 1 ? ",\n" : "") "    {\"name\": " jstr(name) ", \"score\": " num(got) ", \"max_score\": " num(max) \
                ", \"status\": \"" (ok ? "passed" : "failed") "\", \"output\": \"" (ok ? "passed" : jfile(f ".out", jbody(note), maxl)) "\"}"
        cases = cases xml_case(f ".xml", name, v == "timeout" ? note : "no complete JUnit report (the program was stopped)")
    }
    if (build_log != "") {
        summary = title ": the build failed (make check shows the same errors), 0 points"
        out = jfile(build_log, jbody(summary), maxl)
        cases = "    <testcase classname=\"make\" name=\"build\" status=\"run\">\n      <error message=\"the build failed\">" \
                xesc(summary) "</error>\n    </testcase>\n"
        xerr = 1; xcases = 1
    } else {
        summary = title ": " num(score) " of " num(total) " points, " passed " of " n " test cases pass"
        out = jbody(summary)
    }
    visibility = ENVIRON["GRADE_VISIBILITY"] == "" ? "" : "  \"visibility\": \"" ENVIRON["GRADE_VISIBILITY"] "\",\n"
    printf("{\n  \"score\": %s,\n%s  \"output\": \"%s\",\n  \"tests\": [\n%s%s  ]\n}\n", num(score), visibility, out, tests, tests == "" ? "" : "\n") > (json ".tmp")
    printf("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites>\n  <testsuite name=\"%s\" errors=\"%d\" failures=\"%d\" tests=\"%d\">\n%s  </testsuite>\n</testsuites>\n", \
           xesc(title), xerr, xfail, xcases, cases) > (xml ".tmp")
    close(json ".tmp"); close(xml ".tmp")
    print "make grade: " summary " (" json ", " xml ")"
}
