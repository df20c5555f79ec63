# awk: tests.cpp without the TEST_CASEs named "handout: ..." (and the empty line after each).
skip == 2 { skip = 0; if ($0 == "") next }
skip == 1 { if ($0 == "}") skip = 2; next }
/^TEST_CASE\("handout: / { skip = 1; next }
{ skip = 0; print }
