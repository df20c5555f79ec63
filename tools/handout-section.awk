# awk -v n=N: the section "## Assignment N: ..." of docs/assignments.md (its reading list, the
# functions, the rules the cases grade, the counts), its links made to work from the handout's root;
# exit 1 if there is none.
/^## / { on = index($0, "## Assignment " n ":") == 1; found += on }
on {
    gsub(/[]][(]/, "](docs/")
    gsub(/[]][(]docs\/#/, "](docs/assignments.md#")
    gsub(/[]][(]docs\/http/, "](http")
    print
}
END { if (!found) exit 1 }
