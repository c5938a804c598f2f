# `hakmem --options` as man(7) paragraphs (Makefile: hakmem-options.7):
# "HAKMEM_NAME=values" starts an entry, its indented lines follow.
{ gsub(/\\/, "\\e"); gsub(/-/, "\\-") }
/^HAKMEM_/ { print ".TP"; print ".B " $0; next }
/^ +default:/ { sub(/^ +/, ""); print $0; print ".br"; next }
/^ +/ { sub(/^ +/, ""); print $0 }
