# Allocation-heavy Perl work for bench/real.py: a hash of 600k strings,
# strings grown with .=, regular expressions over generated text, and 8
# forked children doing the same kinds of work while the parent waits.
# Seeded; prints one line per part and an MD5 digest of them.
use strict;
use warnings;
use Digest::MD5 qw(md5_hex);

srand(4242);
my @letters = split //, "etaoinshrdlcumwfgypbvk";
my @vocab = map { join "", map { $letters[rand @letters] } 1 .. 3 + int(rand 9) } 1 .. 4096;
my @out;

sub note { my $l = shift; push @out, $l; print "$l\n"; }

# a hash of 600k strings, then a third deleted and a third grown
my %h;
for my $i (1 .. 600_000) {
    $h{"k$i-" . $vocab[$i % 4096]} = $vocab[int rand 4096] x (1 + $i % 3);
}
for my $i (1 .. 200_000) {
    my $k = 3 * $i;
    delete $h{"k$k-" . $vocab[$k % 4096]};
    $k--;
    $h{"k$k-" . $vocab[$k % 4096]} .= "+" . $i;
}
my $bytes = 0;
$bytes += length $h{$_} for keys %h;
note(sprintf "hash: %d keys, %d value bytes", scalar(keys %h), $bytes);

# strings grown with .=, one large and many small
my $big = "";
my @small = ("") x 5000;
for my $i (1 .. 250_000) {
    $big .= $vocab[$i % 4096] . " ";
    $small[$i % 5000] .= $vocab[($i * 7) % 4096];
}
note(sprintf "append: %d bytes, md5 %s", length $big, md5_hex($big . join "", @small));

# regular expressions: count, capture, substitute, split
my $count = () = $big =~ /\b[aeiou]\w*[st]\b/g;
my %firsts;
$firsts{$1}++ while $big =~ /\b(\w\w)\w*\s+\1/g;
(my $edited = $big) =~ s/\b(\w)(\w*)(\w)\b/$3$2$1/g;
my @fields = split /[aeiou]+/, $edited;
note(sprintf "regex: %d matches, %d pairs, %d fields, md5 %s", $count,
     scalar(keys %firsts), scalar(@fields), md5_hex($edited));

# 8 children, each builds and sorts its own hash; results come back by pipe
undef %h;
undef $_ for $big, $edited, @small, @fields;
my @kids;
for my $c (1 .. 8) {
    pipe(my $r, my $w) or die "pipe: $!";
    my $pid = fork;
    die "fork: $!" unless defined $pid;
    if ($pid == 0) {
        close $r;
        my %k;
        $k{$vocab[($_ * $c) % 4096] . $_} = join ",", ($_) x ($c % 4 + 1) for 1 .. 5_000;
        my $s = join ";", sort { length($k{$a}) <=> length($k{$b}) || $a cmp $b } keys %k;
        $s =~ s/(\d+)/<$1>/g;
        print $w md5_hex($s), "\n";
        close $w;
        exit 0;
    }
    close $w;
    push @kids, [$pid, $r];
}
for my $k (@kids) {
    my ($pid, $r) = @$k;
    my $line = <$r>;
    chomp $line;
    waitpid($pid, 0);
    die "child $pid failed" if $?;
    note("child: $line");
}
print "digest ", md5_hex(join "\n", @out), "\n";
