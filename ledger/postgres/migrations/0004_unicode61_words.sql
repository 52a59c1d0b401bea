-- Full-text search splits and folds words as SQLite's does (FTS5's unicode61
-- tokenizer with its default options, ledger/migrations/0003_memory.sql), in
-- every script and whatever the cluster's locale. 0001's ledger_tsv split at
-- `[^[:alnum:]]`, which a C-locale cluster reads as ASCII only ("Héron" was
-- "h", "ron"), and the 'simple' dictionary lowered case through the locale
-- too (É stayed É); unicode61 also drops the diacritics of Latin letters
-- ("Héron" is "heron"; Greek "έ" keeps its accent).
-- * unicode61 decides each character alone: a separator, or a letter that it
--   folds (case; a Latin letter to its base letter), keeps, or drops (25
--   combining marks). ledger_tsv does the same with three tables of code
--   points, SQLite's own: probed code point by code point by
--   tests/unicode61.py (SQLite 3.40.1), which wrote them, and checked for every
--   code point against SQLite's tokenizer by tests/unit/test_pg_unicode_words.py.
--   Nothing asks the locale (lower() is C's, ASCII only; the regular
--   expressions name code points), so the function is IMMUTABLE in fact, as
--   its stored column needs.
-- * Folding comes before splitting, which is safe: every fold is a letter
--   again (the probe says so), so the separators stay where they were. ASCII
--   text (the common case) skips the fold table; otherwise translate() gets
--   the text's own distinct non-ASCII letters that change (translate() scans
--   its whole `from` string for every character of the text: with the table's
--   1,217 letters it cost a millisecond a message; docs/performance.md, "PG
--   migration 0004").
-- * PL/pgSQL, not SQL: it plans its statements once a session, the tables'
--   constants with them. An SQL function that is not one expression is
--   planned again in every statement that calls it (4 ms an INSERT here).
-- * The tsvector is written out and cast, not made by to_tsvector: the text
--   search parser and the 'simple' dictionary classify and lower letters by
--   locale, and the parser splits some ASCII words unicode61 keeps whole (a
--   number, then letters: "31e50x1fabc" is "31e50", "x1fabc"). A word's position counts the words before it; a word of dropped
--   marks only is gone without a position, as in FTS5. A word of 2048 bytes or
--   more is left out, as to_tsvector left it out (a tsvector cannot hold it).
--   No word holds a quote or a backslash: both are separators.
-- * ledger_tsquery is the query of recall's terms (ledger/postgres/recall.py)
--   in the same words: each phrase through ledger_tsv, its words in order at
--   their distances (<N>), the last one a prefix when asked. A phrase with no
--   words is left out, as FTS5 leaves it out; no words at all is NULL, which
--   matches nothing.
-- * Each message keeps its words in a stored column, `words`, and the GIN index
--   is on that column: ranking (ts_rank over up to 2,000 candidates) and a
--   phrase's recheck read the stored vector instead of running ledger_tsv again
--   for every row, which made searches 1.4x-2x slower than under 0003 with an
--   index on the expression (docs/performance.md, "PG migration 0004"). A
--   generated column is right on every write by itself (messages are inserted
--   and deleted, never updated; every INSERT names its columns). It costs the
--   vector's bytes in each row, and adding it rewrites the table.
-- * The column and the index are made in this transaction, so rows written
--   before this migration are found by their new words; writes wait
--   meanwhile. The column is computed after CREATE OR REPLACE above, and the
--   old expression index is dropped, not REINDEXed: 0001's ledger_tsv was a
--   single expression, which PostgreSQL inlines into an index's expression
--   and caches with the index in each session, and CREATE OR REPLACE does not
--   clear that cache. Nothing reads the function through an index any more;
--   a PL/pgSQL function is never inlined, so a session that had written a
--   message before (this one, or another node's) computes `words` with the
--   new function.
CREATE OR REPLACE FUNCTION ledger_tsv(content text) RETURNS tsvector
    LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    folded text := lower(content COLLATE "C");
BEGIN
    IF octet_length(content) <> length(content) THEN  -- not ASCII only
        SELECT translate(
            regexp_replace(folded, '[\u0300-\u0304\u0306-\u030c\u030f\u0311\u031b\u0323-\u0328\u032d-\u032e\u0330-\u0331]', '', 'g'),
            coalesce(string_agg(letter, ''), ''),
            coalesce(string_agg(becomes, ''), '')
        )
        INTO folded
        FROM (
            SELECT DISTINCT letter, (
                '{' ||
                '"\u00b5":"\u03bc","\u00c0":"a","\u00c1":"a","\u00c2":"a","\u00c3":"a","\u00c4":"a",' ||
                '"\u00c5":"a","\u00c6":"\u00e6","\u00c7":"c","\u00c8":"e","\u00c9":"e","\u00ca":"e",' ||
                '"\u00cb":"e","\u00cc":"i","\u00cd":"i","\u00ce":"i","\u00cf":"i","\u00d0":"\u00f0",' ||
                '"\u00d1":"n","\u00d2":"o","\u00d3":"o","\u00d4":"o","\u00d5":"o","\u00d6":"o",' ||
                '"\u00d8":"\u00f8","\u00d9":"u","\u00da":"u","\u00db":"u","\u00dc":"u","\u00dd":"y",' ||
                '"\u00de":"\u00fe","\u00e0":"a","\u00e1":"a","\u00e2":"a","\u00e3":"a","\u00e4":"a",' ||
                '"\u00e5":"a","\u00e7":"c","\u00e8":"e","\u00e9":"e","\u00ea":"e","\u00eb":"e",' ||
                '"\u00ec":"i","\u00ed":"i","\u00ee":"i","\u00ef":"i","\u00f1":"n","\u00f2":"o",' ||
                '"\u00f3":"o","\u00f4":"o","\u00f5":"o","\u00f6":"o","\u00f9":"u","\u00fa":"u",' ||
                '"\u00fb":"u","\u00fc":"u","\u00fd":"y","\u00ff":"y","\u0100":"a","\u0101":"a",' ||
                '"\u0102":"a","\u0103":"a","\u0104":"a","\u0105":"a","\u0106":"c","\u0107":"c",' ||
                '"\u0108":"c","\u0109":"c","\u010a":"c","\u010b":"c","\u010c":"c","\u010d":"c",' ||
                '"\u010e":"d","\u010f":"d","\u0110":"\u0111","\u0112":"e","\u0113":"e","\u0114":"e",' ||
                '"\u0115":"e","\u0116":"e","\u0117":"e","\u0118":"e","\u0119":"e","\u011a":"e",' ||
                '"\u011b":"e","\u011c":"g","\u011d":"g","\u011e":"g","\u011f":"g","\u0120":"g",' ||
                '"\u0121":"g","\u0122":"g","\u0123":"g","\u0124":"h","\u0125":"h","\u0126":"\u0127",' ||
                '"\u0128":"i","\u0129":"i","\u012a":"i","\u012b":"i","\u012c":"i","\u012d":"i",' ||
                '"\u012e":"i","\u012f":"i","\u0130":"i","\u0132":"\u0133","\u0134":"j","\u0135":"j",' ||
                '"\u0136":"k","\u0137":"k","\u0139":"l","\u013a":"l","\u013b":"l","\u013c":"l",' ||
                '"\u013d":"l","\u013e":"l","\u013f":"\u0140","\u0141":"\u0142","\u0143":"n",' ||
                '"\u0144":"n","\u0145":"n","\u0146":"n","\u0147":"n","\u0148":"n","\u014a":"\u014b",' ||
                '"\u014c":"o","\u014d":"o","\u014e":"o","\u014f":"o","\u0150":"o","\u0151":"o",' ||
                '"\u0152":"\u0153","\u0154":"r","\u0155":"r","\u0156":"r","\u0157":"r","\u0158":"r",' ||
                '"\u0159":"r","\u015a":"s","\u015b":"s","\u015c":"s","\u015d":"s","\u015e":"s",' ||
                '"\u015f":"s","\u0160":"s","\u0161":"s","\u0162":"t","\u0163":"t","\u0164":"t",' ||
                '"\u0165":"t","\u0166":"\u0167","\u0168":"u","\u0169":"u","\u016a":"u","\u016b":"u",' ||
                '"\u016c":"u","\u016d":"u","\u016e":"u","\u016f":"u","\u0170":"u","\u0171":"u",' ||
                '"\u0172":"u","\u0173":"u","\u0174":"w","\u0175":"w","\u0176":"y","\u0177":"y",' ||
                '"\u0178":"y","\u0179":"z","\u017a":"z","\u017b":"z","\u017c":"z","\u017d":"z",' ||
                '"\u017e":"z","\u017f":"s","\u0181":"\u0253","\u0182":"\u0183","\u0184":"\u0185",' ||
                '"\u0186":"\u0254","\u0187":"\u0188","\u0189":"\u0256","\u018a":"\u0257",' ||
                '"\u018b":"\u018c","\u018e":"\u01dd","\u018f":"\u0259","\u0190":"\u025b",' ||
                '"\u0191":"\u0192","\u0193":"\u0260","\u0194":"\u0263","\u0196":"\u0269",' ||
                '"\u0197":"\u0268","\u0198":"\u0199","\u019c":"\u026f","\u019d":"\u0272",' ||
                '"\u019f":"\u0275","\u01a0":"o","\u01a1":"o","\u01a2":"\u01a3","\u01a4":"\u01a5",' ||
                '"\u01a6":"\u0280","\u01a7":"\u01a8","\u01a9":"\u0283","\u01ac":"\u01ad",' ||
                '"\u01ae":"\u0288","\u01af":"u","\u01b0":"u","\u01b1":"\u028a","\u01b2":"\u028b",' ||
                '"\u01b3":"\u01b4","\u01b5":"\u01b6","\u01b7":"\u0292","\u01b8":"\u01b9",' ||
                '"\u01bc":"\u01bd","\u01c4":"\u01c6","\u01c5":"\u01c6","\u01c7":"\u01c9",' ||
                '"\u01c8":"\u01c9","\u01ca":"\u01cc","\u01cb":"\u01cc","\u01cd":"a","\u01ce":"a",' ||
                '"\u01cf":"i","\u01d0":"i","\u01d1":"o","\u01d2":"o","\u01d3":"u","\u01d4":"u",' ||
                '"\u01d5":"\u01d6","\u01d7":"\u01d8","\u01d9":"\u01da","\u01db":"\u01dc",' ||
                '"\u01de":"\u01df","\u01e0":"\u01e1","\u01e2":"\u01e3","\u01e4":"\u01e5",' ||
                '"\u01e6":"g","\u01e7":"g","\u01e8":"k","\u01e9":"k","\u01ea":"o","\u01eb":"o",' ||
                '"\u01ec":"\u01ed","\u01ee":"\u01ef","\u01f0":"j","\u01f1":"\u01f3",' ||
                '"\u01f2":"\u01f3","\u01f4":"g","\u01f5":"g","\u01f6":"\u0195","\u01f7":"\u01bf",' ||
                '"\u01f8":"n","\u01f9":"n","\u01fa":"\u01fb","\u01fc":"\u01fd","\u01fe":"\u01ff",' ||
                '"\u0200":"a","\u0201":"a","\u0202":"a","\u0203":"a","\u0204":"e","\u0205":"e",' ||
                '"\u0206":"e","\u0207":"e","\u0208":"i","\u0209":"i","\u020a":"i","\u020b":"i",' ||
                '"\u020c":"o","\u020d":"o","\u020e":"o","\u020f":"o","\u0210":"r","\u0211":"r",' ||
                '"\u0212":"r","\u0213":"r","\u0214":"u","\u0215":"u","\u0216":"u","\u0217":"u",' ||
                '"\u0218":"s","\u0219":"s","\u021a":"t","\u021b":"t","\u021c":"\u021d","\u021e":"h",' ||
                '"\u021f":"h","\u0220":"\u019e","\u0222":"\u0223","\u0224":"\u0225","\u0226":"a",' ||
                '"\u0227":"a","\u0228":"e","\u0229":"e","\u022a":"\u022b","\u022c":"\u022d",' ||
                '"\u022e":"o","\u022f":"o","\u0230":"\u0231","\u0232":"y","\u0233":"y",' ||
                '"\u023a":"\u2c65","\u023b":"\u023c","\u023d":"\u019a","\u023e":"\u2c66",' ||
                '"\u0241":"\u0242","\u0243":"\u0180","\u0244":"\u0289","\u0245":"\u028c",' ||
                '"\u0246":"\u0247","\u0248":"\u0249","\u024a":"\u024b","\u024c":"\u024d",' ||
                '"\u024e":"\u024f","\u0370":"\u0371","\u0372":"\u0373","\u0376":"\u0377",' ||
                '"\u0386":"\u03ac","\u0388":"\u03ad","\u0389":"\u03ae","\u038a":"\u03af",' ||
                '"\u038c":"\u03cc","\u038e":"\u03cd","\u038f":"\u03ce","\u0391":"\u03b1",' ||
                '"\u0392":"\u03b2","\u0393":"\u03b3","\u0394":"\u03b4","\u0395":"\u03b5",' ||
                '"\u0396":"\u03b6","\u0397":"\u03b7","\u0398":"\u03b8","\u0399":"\u03b9",' ||
                '"\u039a":"\u03ba","\u039b":"\u03bb","\u039c":"\u03bc","\u039d":"\u03bd",' ||
                '"\u039e":"\u03be","\u039f":"\u03bf","\u03a0":"\u03c0","\u03a1":"\u03c1",' ||
                '"\u03a3":"\u03c3","\u03a4":"\u03c4","\u03a5":"\u03c5","\u03a6":"\u03c6",' ||
                '"\u03a7":"\u03c7","\u03a8":"\u03c8","\u03a9":"\u03c9","\u03aa":"\u03ca",' ||
                '"\u03ab":"\u03cb","\u03c2":"\u03c3","\u03cf":"\u03d7","\u03d0":"\u03b2",' ||
                '"\u03d1":"\u03b8","\u03d5":"\u03c6","\u03d6":"\u03c0","\u03d8":"\u03d9",' ||
                '"\u03da":"\u03db","\u03dc":"\u03dd","\u03de":"\u03df","\u03e0":"\u03e1",' ||
                '"\u03e2":"\u03e3","\u03e4":"\u03e5","\u03e6":"\u03e7","\u03e8":"\u03e9",' ||
                '"\u03ea":"\u03eb","\u03ec":"\u03ed","\u03ee":"\u03ef","\u03f0":"\u03ba",' ||
                '"\u03f1":"\u03c1","\u03f4":"\u03b8","\u03f5":"\u03b5","\u03f7":"\u03f8",' ||
                '"\u03f9":"\u03f2","\u03fa":"\u03fb","\u03fd":"\u037b","\u03fe":"\u037c",' ||
                '"\u03ff":"\u037d","\u0400":"\u0450","\u0401":"\u0451","\u0402":"\u0452",' ||
                '"\u0403":"\u0453","\u0404":"\u0454","\u0405":"\u0455","\u0406":"\u0456",' ||
                '"\u0407":"\u0457","\u0408":"\u0458","\u0409":"\u0459","\u040a":"\u045a",' ||
                '"\u040b":"\u045b","\u040c":"\u045c","\u040d":"\u045d","\u040e":"\u045e",' ||
                '"\u040f":"\u045f","\u0410":"\u0430","\u0411":"\u0431","\u0412":"\u0432",' ||
                '"\u0413":"\u0433","\u0414":"\u0434","\u0415":"\u0435","\u0416":"\u0436",' ||
                '"\u0417":"\u0437","\u0418":"\u0438","\u0419":"\u0439","\u041a":"\u043a",' ||
                '"\u041b":"\u043b","\u041c":"\u043c","\u041d":"\u043d","\u041e":"\u043e",' ||
                '"\u041f":"\u043f","\u0420":"\u0440","\u0421":"\u0441","\u0422":"\u0442",' ||
                '"\u0423":"\u0443","\u0424":"\u0444","\u0425":"\u0445","\u0426":"\u0446",' ||
                '"\u0427":"\u0447","\u0428":"\u0448","\u0429":"\u0449","\u042a":"\u044a",' ||
                '"\u042b":"\u044b","\u042c":"\u044c","\u042d":"\u044d","\u042e":"\u044e",' ||
                '"\u042f":"\u044f","\u0460":"\u0461","\u0462":"\u0463","\u0464":"\u0465",' ||
                '"\u0466":"\u0467","\u0468":"\u0469","\u046a":"\u046b","\u046c":"\u046d",' ||
                '"\u046e":"\u046f","\u0470":"\u0471","\u0472":"\u0473","\u0474":"\u0475",' ||
                '"\u0476":"\u0477","\u0478":"\u0479","\u047a":"\u047b","\u047c":"\u047d",' ||
                '"\u047e":"\u047f","\u0480":"\u0481","\u048a":"\u048b","\u048c":"\u048d",' ||
                '"\u048e":"\u048f","\u0490":"\u0491","\u0492":"\u0493","\u0494":"\u0495",' ||
                '"\u0496":"\u0497","\u0498":"\u0499","\u049a":"\u049b","\u049c":"\u049d",' ||
                '"\u049e":"\u049f","\u04a0":"\u04a1","\u04a2":"\u04a3","\u04a4":"\u04a5",' ||
                '"\u04a6":"\u04a7","\u04a8":"\u04a9","\u04aa":"\u04ab","\u04ac":"\u04ad",' ||
                '"\u04ae":"\u04af","\u04b0":"\u04b1","\u04b2":"\u04b3","\u04b4":"\u04b5",' ||
                '"\u04b6":"\u04b7","\u04b8":"\u04b9","\u04ba":"\u04bb","\u04bc":"\u04bd",' ||
                '"\u04be":"\u04bf","\u04c0":"\u04cf","\u04c1":"\u04c2","\u04c3":"\u04c4",' ||
                '"\u04c5":"\u04c6","\u04c7":"\u04c8","\u04c9":"\u04ca","\u04cb":"\u04cc",' ||
                '"\u04cd":"\u04ce","\u04d0":"\u04d1","\u04d2":"\u04d3","\u04d4":"\u04d5",' ||
                '"\u04d6":"\u04d7","\u04d8":"\u04d9","\u04da":"\u04db","\u04dc":"\u04dd",' ||
                '"\u04de":"\u04df","\u04e0":"\u04e1","\u04e2":"\u04e3","\u04e4":"\u04e5",' ||
                '"\u04e6":"\u04e7","\u04e8":"\u04e9","\u04ea":"\u04eb","\u04ec":"\u04ed",' ||
                '"\u04ee":"\u04ef","\u04f0":"\u04f1","\u04f2":"\u04f3","\u04f4":"\u04f5",' ||
                '"\u04f6":"\u04f7","\u04f8":"\u04f9","\u04fa":"\u04fb","\u04fc":"\u04fd",' ||
                '"\u04fe":"\u04ff","\u0500":"\u0501","\u0502":"\u0503","\u0504":"\u0505",' ||
                '"\u0506":"\u0507","\u0508":"\u0509","\u050a":"\u050b","\u050c":"\u050d",' ||
                '"\u050e":"\u050f","\u0510":"\u0511","\u0512":"\u0513","\u0514":"\u0515",' ||
                '"\u0516":"\u0517","\u0518":"\u0519","\u051a":"\u051b","\u051c":"\u051d",' ||
                '"\u051e":"\u051f","\u0520":"\u0521","\u0522":"\u0523","\u0524":"\u0525",' ||
                '"\u0526":"\u0527","\u0531":"\u0561","\u0532":"\u0562","\u0533":"\u0563",' ||
                '"\u0534":"\u0564","\u0535":"\u0565","\u0536":"\u0566","\u0537":"\u0567",' ||
                '"\u0538":"\u0568","\u0539":"\u0569","\u053a":"\u056a","\u053b":"\u056b",' ||
                '"\u053c":"\u056c","\u053d":"\u056d","\u053e":"\u056e","\u053f":"\u056f",' ||
                '"\u0540":"\u0570","\u0541":"\u0571","\u0542":"\u0572","\u0543":"\u0573",' ||
                '"\u0544":"\u0574","\u0545":"\u0575","\u0546":"\u0576","\u0547":"\u0577",' ||
                '"\u0548":"\u0578","\u0549":"\u0579","\u054a":"\u057a","\u054b":"\u057b",' ||
                '"\u054c":"\u057c","\u054d":"\u057d","\u054e":"\u057e","\u054f":"\u057f",' ||
                '"\u0550":"\u0580","\u0551":"\u0581","\u0552":"\u0582","\u0553":"\u0583",' ||
                '"\u0554":"\u0584","\u0555":"\u0585","\u0556":"\u0586","\u10a0":"\u2d00",' ||
                '"\u10a1":"\u2d01","\u10a2":"\u2d02","\u10a3":"\u2d03","\u10a4":"\u2d04",' ||
                '"\u10a5":"\u2d05","\u10a6":"\u2d06","\u10a7":"\u2d07","\u10a8":"\u2d08",' ||
                '"\u10a9":"\u2d09","\u10aa":"\u2d0a","\u10ab":"\u2d0b","\u10ac":"\u2d0c",' ||
                '"\u10ad":"\u2d0d","\u10ae":"\u2d0e","\u10af":"\u2d0f","\u10b0":"\u2d10",' ||
                '"\u10b1":"\u2d11","\u10b2":"\u2d12","\u10b3":"\u2d13","\u10b4":"\u2d14",' ||
                '"\u10b5":"\u2d15","\u10b6":"\u2d16","\u10b7":"\u2d17","\u10b8":"\u2d18",' ||
                '"\u10b9":"\u2d19","\u10ba":"\u2d1a","\u10bb":"\u2d1b","\u10bc":"\u2d1c",' ||
                '"\u10bd":"\u2d1d","\u10be":"\u2d1e","\u10bf":"\u2d1f","\u10c0":"\u2d20",' ||
                '"\u10c1":"\u2d21","\u10c2":"\u2d22","\u10c3":"\u2d23","\u10c4":"\u2d24",' ||
                '"\u10c5":"\u2d25","\u10c7":"\u2d27","\u10cd":"\u2d2d","\u1e00":"a","\u1e01":"a",' ||
                '"\u1e02":"b","\u1e03":"b","\u1e04":"b","\u1e05":"b","\u1e06":"b","\u1e07":"b",' ||
                '"\u1e08":"\u1e09","\u1e0a":"d","\u1e0b":"d","\u1e0c":"d","\u1e0d":"d","\u1e0e":"d",' ||
                '"\u1e0f":"d","\u1e10":"d","\u1e11":"d","\u1e12":"d","\u1e13":"d","\u1e14":"\u1e15",' ||
                '"\u1e16":"\u1e17","\u1e18":"e","\u1e19":"e","\u1e1a":"e","\u1e1b":"e",' ||
                '"\u1e1c":"\u1e1d","\u1e1e":"f","\u1e1f":"f","\u1e20":"g","\u1e21":"g","\u1e22":"h",' ||
                '"\u1e23":"h","\u1e24":"h","\u1e25":"h","\u1e26":"h","\u1e27":"h","\u1e28":"h",' ||
                '"\u1e29":"h","\u1e2a":"h","\u1e2b":"h","\u1e2c":"i","\u1e2d":"i","\u1e2e":"\u1e2f",' ||
                '"\u1e30":"k","\u1e31":"k","\u1e32":"k","\u1e33":"k","\u1e34":"k","\u1e35":"k",' ||
                '"\u1e36":"l","\u1e37":"l","\u1e38":"\u1e39","\u1e3a":"l","\u1e3b":"l","\u1e3c":"l",' ||
                '"\u1e3d":"l","\u1e3e":"m","\u1e3f":"m","\u1e40":"m","\u1e41":"m","\u1e42":"m",' ||
                '"\u1e43":"m","\u1e44":"n","\u1e45":"n","\u1e46":"n","\u1e47":"n","\u1e48":"n",' ||
                '"\u1e49":"n","\u1e4a":"n","\u1e4b":"n","\u1e4c":"\u1e4d","\u1e4e":"\u1e4f",' ||
                '"\u1e50":"\u1e51","\u1e52":"\u1e53","\u1e54":"p","\u1e55":"p","\u1e56":"p",' ||
                '"\u1e57":"p","\u1e58":"r","\u1e59":"r","\u1e5a":"r","\u1e5b":"r","\u1e5c":"\u1e5d",' ||
                '"\u1e5e":"r","\u1e5f":"r","\u1e60":"s","\u1e61":"s","\u1e62":"s","\u1e63":"s",' ||
                '"\u1e64":"\u1e65","\u1e66":"\u1e67","\u1e68":"\u1e69","\u1e6a":"t","\u1e6b":"t",' ||
                '"\u1e6c":"t","\u1e6d":"t","\u1e6e":"t","\u1e6f":"t","\u1e70":"t","\u1e71":"t",' ||
                '"\u1e72":"u","\u1e73":"u","\u1e74":"u","\u1e75":"u","\u1e76":"u","\u1e77":"u",' ||
                '"\u1e78":"\u1e79","\u1e7a":"\u1e7b","\u1e7c":"v","\u1e7d":"v","\u1e7e":"v",' ||
                '"\u1e7f":"v","\u1e80":"w","\u1e81":"w","\u1e82":"w","\u1e83":"w","\u1e84":"w",' ||
                '"\u1e85":"w","\u1e86":"w","\u1e87":"w","\u1e88":"w","\u1e89":"w","\u1e8a":"x",' ||
                '"\u1e8b":"x","\u1e8c":"x","\u1e8d":"x","\u1e8e":"y","\u1e8f":"y","\u1e90":"z",' ||
                '"\u1e91":"z","\u1e92":"z","\u1e93":"z","\u1e94":"z","\u1e95":"z","\u1e96":"h",' ||
                '"\u1e97":"t","\u1e98":"w","\u1e99":"y","\u1e9b":"s","\u1e9e":"\u00df","\u1ea0":"a",' ||
                '"\u1ea1":"a","\u1ea2":"a","\u1ea3":"a","\u1ea4":"\u1ea5","\u1ea6":"\u1ea7",' ||
                '"\u1ea8":"\u1ea9","\u1eaa":"\u1eab","\u1eac":"\u1ead","\u1eae":"\u1eaf",' ||
                '"\u1eb0":"\u1eb1","\u1eb2":"\u1eb3","\u1eb4":"\u1eb5","\u1eb6":"\u1eb7",' ||
                '"\u1eb8":"e","\u1eb9":"e","\u1eba":"e","\u1ebb":"e","\u1ebc":"e","\u1ebd":"e",' ||
                '"\u1ebe":"\u1ebf","\u1ec0":"\u1ec1","\u1ec2":"\u1ec3","\u1ec4":"\u1ec5",' ||
                '"\u1ec6":"\u1ec7","\u1ec8":"i","\u1ec9":"i","\u1eca":"i","\u1ecb":"i","\u1ecc":"o",' ||
                '"\u1ecd":"o","\u1ece":"o","\u1ecf":"o","\u1ed0":"\u1ed1","\u1ed2":"\u1ed3",' ||
                '"\u1ed4":"\u1ed5","\u1ed6":"\u1ed7","\u1ed8":"\u1ed9","\u1eda":"\u1edb",' ||
                '"\u1edc":"\u1edd","\u1ede":"\u1edf","\u1ee0":"\u1ee1","\u1ee2":"\u1ee3",' ||
                '"\u1ee4":"u","\u1ee5":"u","\u1ee6":"u","\u1ee7":"u","\u1ee8":"\u1ee9",' ||
                '"\u1eea":"\u1eeb","\u1eec":"\u1eed","\u1eee":"\u1eef","\u1ef0":"\u1ef1",' ||
                '"\u1ef2":"y","\u1ef3":"y","\u1ef4":"y","\u1ef5":"y","\u1ef6":"y","\u1ef7":"y",' ||
                '"\u1ef8":"y","\u1ef9":"y","\u1efa":"\u1efb","\u1efc":"\u1efd","\u1efe":"\u1eff",' ||
                '"\u1f08":"\u1f00","\u1f09":"\u1f01","\u1f0a":"\u1f02","\u1f0b":"\u1f03",' ||
                '"\u1f0c":"\u1f04","\u1f0d":"\u1f05","\u1f0e":"\u1f06","\u1f0f":"\u1f07",' ||
                '"\u1f18":"\u1f10","\u1f19":"\u1f11","\u1f1a":"\u1f12","\u1f1b":"\u1f13",' ||
                '"\u1f1c":"\u1f14","\u1f1d":"\u1f15","\u1f28":"\u1f20","\u1f29":"\u1f21",' ||
                '"\u1f2a":"\u1f22","\u1f2b":"\u1f23","\u1f2c":"\u1f24","\u1f2d":"\u1f25",' ||
                '"\u1f2e":"\u1f26","\u1f2f":"\u1f27","\u1f38":"\u1f30","\u1f39":"\u1f31",' ||
                '"\u1f3a":"\u1f32","\u1f3b":"\u1f33","\u1f3c":"\u1f34","\u1f3d":"\u1f35",' ||
                '"\u1f3e":"\u1f36","\u1f3f":"\u1f37","\u1f48":"\u1f40","\u1f49":"\u1f41",' ||
                '"\u1f4a":"\u1f42","\u1f4b":"\u1f43","\u1f4c":"\u1f44","\u1f4d":"\u1f45",' ||
                '"\u1f59":"\u1f51","\u1f5b":"\u1f53","\u1f5d":"\u1f55","\u1f5f":"\u1f57",' ||
                '"\u1f68":"\u1f60","\u1f69":"\u1f61","\u1f6a":"\u1f62","\u1f6b":"\u1f63",' ||
                '"\u1f6c":"\u1f64","\u1f6d":"\u1f65","\u1f6e":"\u1f66","\u1f6f":"\u1f67",' ||
                '"\u1f88":"\u1f80","\u1f89":"\u1f81","\u1f8a":"\u1f82","\u1f8b":"\u1f83",' ||
                '"\u1f8c":"\u1f84","\u1f8d":"\u1f85","\u1f8e":"\u1f86","\u1f8f":"\u1f87",' ||
                '"\u1f98":"\u1f90","\u1f99":"\u1f91","\u1f9a":"\u1f92","\u1f9b":"\u1f93",' ||
                '"\u1f9c":"\u1f94","\u1f9d":"\u1f95","\u1f9e":"\u1f96","\u1f9f":"\u1f97",' ||
                '"\u1fa8":"\u1fa0","\u1fa9":"\u1fa1","\u1faa":"\u1fa2","\u1fab":"\u1fa3",' ||
                '"\u1fac":"\u1fa4","\u1fad":"\u1fa5","\u1fae":"\u1fa6","\u1faf":"\u1fa7",' ||
                '"\u1fb8":"\u1fb0","\u1fb9":"\u1fb1","\u1fba":"\u1f70","\u1fbb":"\u1f71",' ||
                '"\u1fbc":"\u1fb3","\u1fbe":"\u03b9","\u1fc8":"\u1f72","\u1fc9":"\u1f73",' ||
                '"\u1fca":"\u1f74","\u1fcb":"\u1f75","\u1fcc":"\u1fc3","\u1fd8":"\u1fd0",' ||
                '"\u1fd9":"\u1fd1","\u1fda":"\u1f76","\u1fdb":"\u1f77","\u1fe8":"\u1fe0",' ||
                '"\u1fe9":"\u1fe1","\u1fea":"\u1f7a","\u1feb":"\u1f7b","\u1fec":"\u1fe5",' ||
                '"\u1ff8":"\u1f78","\u1ff9":"\u1f79","\u1ffa":"\u1f7c","\u1ffb":"\u1f7d",' ||
                '"\u1ffc":"\u1ff3","\u2126":"\u03c9","\u212a":"k","\u212b":"a","\u2132":"\u214e",' ||
                '"\u2160":"\u2170","\u2161":"\u2171","\u2162":"\u2172","\u2163":"\u2173",' ||
                '"\u2164":"\u2174","\u2165":"\u2175","\u2166":"\u2176","\u2167":"\u2177",' ||
                '"\u2168":"\u2178","\u2169":"\u2179","\u216a":"\u217a","\u216b":"\u217b",' ||
                '"\u216c":"\u217c","\u216d":"\u217d","\u216e":"\u217e","\u216f":"\u217f",' ||
                '"\u2183":"\u2184","\u2c00":"\u2c30","\u2c01":"\u2c31","\u2c02":"\u2c32",' ||
                '"\u2c03":"\u2c33","\u2c04":"\u2c34","\u2c05":"\u2c35","\u2c06":"\u2c36",' ||
                '"\u2c07":"\u2c37","\u2c08":"\u2c38","\u2c09":"\u2c39","\u2c0a":"\u2c3a",' ||
                '"\u2c0b":"\u2c3b","\u2c0c":"\u2c3c","\u2c0d":"\u2c3d","\u2c0e":"\u2c3e",' ||
                '"\u2c0f":"\u2c3f","\u2c10":"\u2c40","\u2c11":"\u2c41","\u2c12":"\u2c42",' ||
                '"\u2c13":"\u2c43","\u2c14":"\u2c44","\u2c15":"\u2c45","\u2c16":"\u2c46",' ||
                '"\u2c17":"\u2c47","\u2c18":"\u2c48","\u2c19":"\u2c49","\u2c1a":"\u2c4a",' ||
                '"\u2c1b":"\u2c4b","\u2c1c":"\u2c4c","\u2c1d":"\u2c4d","\u2c1e":"\u2c4e",' ||
                '"\u2c1f":"\u2c4f","\u2c20":"\u2c50","\u2c21":"\u2c51","\u2c22":"\u2c52",' ||
                '"\u2c23":"\u2c53","\u2c24":"\u2c54","\u2c25":"\u2c55","\u2c26":"\u2c56",' ||
                '"\u2c27":"\u2c57","\u2c28":"\u2c58","\u2c29":"\u2c59","\u2c2a":"\u2c5a",' ||
                '"\u2c2b":"\u2c5b","\u2c2c":"\u2c5c","\u2c2d":"\u2c5d","\u2c2e":"\u2c5e",' ||
                '"\u2c60":"\u2c61","\u2c62":"\u026b","\u2c63":"\u1d7d","\u2c64":"\u027d",' ||
                '"\u2c67":"\u2c68","\u2c69":"\u2c6a","\u2c6b":"\u2c6c","\u2c6d":"\u0251",' ||
                '"\u2c6e":"\u0271","\u2c6f":"\u0250","\u2c70":"\u0252","\u2c72":"\u2c73",' ||
                '"\u2c75":"\u2c76","\u2c7e":"\u023f","\u2c7f":"\u0240","\u2c80":"\u2c81",' ||
                '"\u2c82":"\u2c83","\u2c84":"\u2c85","\u2c86":"\u2c87","\u2c88":"\u2c89",' ||
                '"\u2c8a":"\u2c8b","\u2c8c":"\u2c8d","\u2c8e":"\u2c8f","\u2c90":"\u2c91",' ||
                '"\u2c92":"\u2c93","\u2c94":"\u2c95","\u2c96":"\u2c97","\u2c98":"\u2c99",' ||
                '"\u2c9a":"\u2c9b","\u2c9c":"\u2c9d","\u2c9e":"\u2c9f","\u2ca0":"\u2ca1",' ||
                '"\u2ca2":"\u2ca3","\u2ca4":"\u2ca5","\u2ca6":"\u2ca7","\u2ca8":"\u2ca9",' ||
                '"\u2caa":"\u2cab","\u2cac":"\u2cad","\u2cae":"\u2caf","\u2cb0":"\u2cb1",' ||
                '"\u2cb2":"\u2cb3","\u2cb4":"\u2cb5","\u2cb6":"\u2cb7","\u2cb8":"\u2cb9",' ||
                '"\u2cba":"\u2cbb","\u2cbc":"\u2cbd","\u2cbe":"\u2cbf","\u2cc0":"\u2cc1",' ||
                '"\u2cc2":"\u2cc3","\u2cc4":"\u2cc5","\u2cc6":"\u2cc7","\u2cc8":"\u2cc9",' ||
                '"\u2cca":"\u2ccb","\u2ccc":"\u2ccd","\u2cce":"\u2ccf","\u2cd0":"\u2cd1",' ||
                '"\u2cd2":"\u2cd3","\u2cd4":"\u2cd5","\u2cd6":"\u2cd7","\u2cd8":"\u2cd9",' ||
                '"\u2cda":"\u2cdb","\u2cdc":"\u2cdd","\u2cde":"\u2cdf","\u2ce0":"\u2ce1",' ||
                '"\u2ce2":"\u2ce3","\u2ceb":"\u2cec","\u2ced":"\u2cee","\u2cf2":"\u2cf3",' ||
                '"\ua640":"\ua641","\ua642":"\ua643","\ua644":"\ua645","\ua646":"\ua647",' ||
                '"\ua648":"\ua649","\ua64a":"\ua64b","\ua64c":"\ua64d","\ua64e":"\ua64f",' ||
                '"\ua650":"\ua651","\ua652":"\ua653","\ua654":"\ua655","\ua656":"\ua657",' ||
                '"\ua658":"\ua659","\ua65a":"\ua65b","\ua65c":"\ua65d","\ua65e":"\ua65f",' ||
                '"\ua660":"\ua661","\ua662":"\ua663","\ua664":"\ua665","\ua666":"\ua667",' ||
                '"\ua668":"\ua669","\ua66a":"\ua66b","\ua66c":"\ua66d","\ua680":"\ua681",' ||
                '"\ua682":"\ua683","\ua684":"\ua685","\ua686":"\ua687","\ua688":"\ua689",' ||
                '"\ua68a":"\ua68b","\ua68c":"\ua68d","\ua68e":"\ua68f","\ua690":"\ua691",' ||
                '"\ua692":"\ua693","\ua694":"\ua695","\ua696":"\ua697","\ua722":"\ua723",' ||
                '"\ua724":"\ua725","\ua726":"\ua727","\ua728":"\ua729","\ua72a":"\ua72b",' ||
                '"\ua72c":"\ua72d","\ua72e":"\ua72f","\ua732":"\ua733","\ua734":"\ua735",' ||
                '"\ua736":"\ua737","\ua738":"\ua739","\ua73a":"\ua73b","\ua73c":"\ua73d",' ||
                '"\ua73e":"\ua73f","\ua740":"\ua741","\ua742":"\ua743","\ua744":"\ua745",' ||
                '"\ua746":"\ua747","\ua748":"\ua749","\ua74a":"\ua74b","\ua74c":"\ua74d",' ||
                '"\ua74e":"\ua74f","\ua750":"\ua751","\ua752":"\ua753","\ua754":"\ua755",' ||
                '"\ua756":"\ua757","\ua758":"\ua759","\ua75a":"\ua75b","\ua75c":"\ua75d",' ||
                '"\ua75e":"\ua75f","\ua760":"\ua761","\ua762":"\ua763","\ua764":"\ua765",' ||
                '"\ua766":"\ua767","\ua768":"\ua769","\ua76a":"\ua76b","\ua76c":"\ua76d",' ||
                '"\ua76e":"\ua76f","\ua779":"\ua77a","\ua77b":"\ua77c","\ua77d":"\u1d79",' ||
                '"\ua77e":"\ua77f","\ua780":"\ua781","\ua782":"\ua783","\ua784":"\ua785",' ||
                '"\ua786":"\ua787","\ua78b":"\ua78c","\ua78d":"\u0265","\ua790":"\ua791",' ||
                '"\ua792":"\ua793","\ua7a0":"\ua7a1","\ua7a2":"\ua7a3","\ua7a4":"\ua7a5",' ||
                '"\ua7a6":"\ua7a7","\ua7a8":"\ua7a9","\ua7aa":"\u0266","\uff21":"\uff41",' ||
                '"\uff22":"\uff42","\uff23":"\uff43","\uff24":"\uff44","\uff25":"\uff45",' ||
                '"\uff26":"\uff46","\uff27":"\uff47","\uff28":"\uff48","\uff29":"\uff49",' ||
                '"\uff2a":"\uff4a","\uff2b":"\uff4b","\uff2c":"\uff4c","\uff2d":"\uff4d",' ||
                '"\uff2e":"\uff4e","\uff2f":"\uff4f","\uff30":"\uff50","\uff31":"\uff51",' ||
                '"\uff32":"\uff52","\uff33":"\uff53","\uff34":"\uff54","\uff35":"\uff55",' ||
                '"\uff36":"\uff56","\uff37":"\uff57","\uff38":"\uff58","\uff39":"\uff59",' ||
                '"\uff3a":"\uff5a","\ud801\udc00":"\ud801\udc28","\ud801\udc01":"\ud801\udc29",' ||
                '"\ud801\udc02":"\ud801\udc2a","\ud801\udc03":"\ud801\udc2b",' ||
                '"\ud801\udc04":"\ud801\udc2c","\ud801\udc05":"\ud801\udc2d",' ||
                '"\ud801\udc06":"\ud801\udc2e","\ud801\udc07":"\ud801\udc2f",' ||
                '"\ud801\udc08":"\ud801\udc30","\ud801\udc09":"\ud801\udc31",' ||
                '"\ud801\udc0a":"\ud801\udc32","\ud801\udc0b":"\ud801\udc33",' ||
                '"\ud801\udc0c":"\ud801\udc34","\ud801\udc0d":"\ud801\udc35",' ||
                '"\ud801\udc0e":"\ud801\udc36","\ud801\udc0f":"\ud801\udc37",' ||
                '"\ud801\udc10":"\ud801\udc38","\ud801\udc11":"\ud801\udc39",' ||
                '"\ud801\udc12":"\ud801\udc3a","\ud801\udc13":"\ud801\udc3b",' ||
                '"\ud801\udc14":"\ud801\udc3c","\ud801\udc15":"\ud801\udc3d",' ||
                '"\ud801\udc16":"\ud801\udc3e","\ud801\udc17":"\ud801\udc3f",' ||
                '"\ud801\udc18":"\ud801\udc40","\ud801\udc19":"\ud801\udc41",' ||
                '"\ud801\udc1a":"\ud801\udc42","\ud801\udc1b":"\ud801\udc43",' ||
                '"\ud801\udc1c":"\ud801\udc44","\ud801\udc1d":"\ud801\udc45",' ||
                '"\ud801\udc1e":"\ud801\udc46","\ud801\udc1f":"\ud801\udc47",' ||
                '"\ud801\udc20":"\ud801\udc48","\ud801\udc21":"\ud801\udc49",' ||
                '"\ud801\udc22":"\ud801\udc4a","\ud801\udc23":"\ud801\udc4b",' ||
                '"\ud801\udc24":"\ud801\udc4c","\ud801\udc25":"\ud801\udc4d",' ||
                '"\ud801\udc26":"\ud801\udc4e","\ud801\udc27":"\ud801\udc4f"' ||
                '}'
            )::jsonb ->> letter AS becomes
            FROM string_to_table(regexp_replace(content, '[\u0001-\u007f]+', '', 'g'), NULL)
                AS letter
        ) AS non_ascii
        WHERE becomes IS NOT NULL;
    END IF;
    RETURN (
        SELECT coalesce(string_agg('''' || word || ''':' || n, ' '), '')::tsvector
        FROM regexp_split_to_table(
            folded,
            -- unicode61's separators
            '[' ||
            '\u0001-\u002f\u003a-\u0040\u005b-\u0060\u007b-\u00a9\u00ab-\u00b1\u00b4\u00b6-\u00b8' ||
            '\u00bb\u00bf\u00d7\u00f7\u02c2-\u02c5\u02d2-\u02df\u02e5-\u02eb\u02ed\u02ef-\u02ff' ||
            '\u0305\u030d-\u030e\u0310\u0312-\u031a\u031c-\u0322\u0329-\u032c\u032f\u0332-\u036f' ||
            '\u0375\u037e\u0384-\u0385\u0387\u03f6\u0482-\u0489\u055a-\u055f\u0589-\u058a\u058f' ||
            '\u0591-\u05c7\u05f3-\u05f4\u0600-\u0604\u0606-\u061b\u061e-\u061f\u064b-\u065f' ||
            '\u066a-\u066d\u0670\u06d4\u06d6-\u06e4\u06e7-\u06ed\u06fd-\u06fe\u0700-\u070d\u070f' ||
            '\u0711\u0730-\u074a\u07a6-\u07b0\u07eb-\u07f3\u07f6-\u07f9\u0816-\u0819\u081b-\u0823' ||
            '\u0825-\u0827\u0829-\u082d\u0830-\u083e\u0859-\u085b\u085e\u08e4-\u08fe\u0900-\u0903' ||
            '\u093a-\u093c\u093e-\u094f\u0951-\u0957\u0962-\u0965\u0970\u0981-\u0983\u09bc' ||
            '\u09be-\u09c4\u09c7-\u09c8\u09cb-\u09cd\u09d7\u09e2-\u09e3\u09f2-\u09f3\u09fa-\u09fb' ||
            '\u0a01-\u0a03\u0a3c\u0a3e-\u0a42\u0a47-\u0a48\u0a4b-\u0a4d\u0a51\u0a70-\u0a71\u0a75' ||
            '\u0a81-\u0a83\u0abc\u0abe-\u0ac5\u0ac7-\u0ac9\u0acb-\u0acd\u0ae2-\u0ae3\u0af0-\u0af1' ||
            '\u0b01-\u0b03\u0b3c\u0b3e-\u0b44\u0b47-\u0b48\u0b4b-\u0b4d\u0b56-\u0b57\u0b62-\u0b63' ||
            '\u0b70\u0b82\u0bbe-\u0bc2\u0bc6-\u0bc8\u0bca-\u0bcd\u0bd7\u0bf3-\u0bfa\u0c01-\u0c03' ||
            '\u0c3e-\u0c44\u0c46-\u0c48\u0c4a-\u0c4d\u0c55-\u0c56\u0c62-\u0c63\u0c7f\u0c82-\u0c83' ||
            '\u0cbc\u0cbe-\u0cc4\u0cc6-\u0cc8\u0cca-\u0ccd\u0cd5-\u0cd6\u0ce2-\u0ce3\u0d02-\u0d03' ||
            '\u0d3e-\u0d44\u0d46-\u0d48\u0d4a-\u0d4d\u0d57\u0d62-\u0d63\u0d79\u0d82-\u0d83\u0dca' ||
            '\u0dcf-\u0dd4\u0dd6\u0dd8-\u0ddf\u0df2-\u0df4\u0e31\u0e34-\u0e3a\u0e3f\u0e47-\u0e4f' ||
            '\u0e5a-\u0e5b\u0eb1\u0eb4-\u0eb9\u0ebb-\u0ebc\u0ec8-\u0ecd\u0f01-\u0f1f\u0f34-\u0f3f' ||
            '\u0f71-\u0f87\u0f8d-\u0f97\u0f99-\u0fbc\u0fbe-\u0fcc\u0fce-\u0fda\u102b-\u103e' ||
            '\u104a-\u104f\u1056-\u1059\u105e-\u1060\u1062-\u1064\u1067-\u106d\u1071-\u1074' ||
            '\u1082-\u108d\u108f\u109a-\u109f\u10fb\u135d-\u1368\u1390-\u1399\u1400\u166d-\u166e' ||
            '\u1680\u169b-\u169c\u16eb-\u16ed\u1712-\u1714\u1732-\u1736\u1752-\u1753\u1772-\u1773' ||
            '\u17b4-\u17d6\u17d8-\u17db\u17dd\u1800-\u180e\u18a9\u1920-\u192b\u1930-\u193b\u1940' ||
            '\u1944-\u1945\u19b0-\u19c0\u19c8-\u19c9\u19de-\u19ff\u1a17-\u1a1b\u1a1e-\u1a1f' ||
            '\u1a55-\u1a5e\u1a60-\u1a7c\u1a7f\u1aa0-\u1aa6\u1aa8-\u1aad\u1b00-\u1b04\u1b34-\u1b44' ||
            '\u1b5a-\u1b7c\u1b80-\u1b82\u1ba1-\u1bad\u1be6-\u1bf3\u1bfc-\u1bff\u1c24-\u1c37' ||
            '\u1c3b-\u1c3f\u1c7e-\u1c7f\u1cc0-\u1cc7\u1cd0-\u1ce8\u1ced\u1cf2-\u1cf4\u1dc0-\u1de6' ||
            '\u1dfc-\u1dff\u1fbd\u1fbf-\u1fc1\u1fcd-\u1fcf\u1fdd-\u1fdf\u1fed-\u1fef\u1ffd-\u1ffe' ||
            '\u2000-\u2064\u206a-\u206f\u207a-\u207e\u208a-\u208e\u20a0-\u20b9\u20d0-\u20f0' ||
            '\u2100-\u2101\u2103-\u2106\u2108-\u2109\u2114\u2116-\u2118\u211e-\u2123\u2125\u2127' ||
            '\u2129\u212e\u213a-\u213b\u2140-\u2144\u214a-\u214d\u214f\u2190-\u23f3\u2400-\u2426' ||
            '\u2440-\u244a\u249c-\u24e9\u2500-\u26ff\u2701-\u2775\u2794-\u2b4c\u2b50-\u2b59' ||
            '\u2ce5-\u2cea\u2cef-\u2cf1\u2cf9-\u2cfc\u2cfe-\u2cff\u2d70\u2d7f\u2de0-\u2e2e' ||
            '\u2e30-\u2e3b\u2e80-\u2e99\u2e9b-\u2ef3\u2f00-\u2fd5\u2ff0-\u2ffb\u3000-\u3004' ||
            '\u3008-\u3020\u302a-\u3030\u3036-\u3037\u303d-\u303f\u3099-\u309c\u30a0\u30fb' ||
            '\u3190-\u3191\u3196-\u319f\u31c0-\u31e3\u3200-\u321e\u322a-\u3247\u3250\u3260-\u327f' ||
            '\u328a-\u32b0\u32c0-\u32fe\u3300-\u33ff\u4dc0-\u4dff\ua490-\ua4c6\ua4fe-\ua4ff' ||
            '\ua60d-\ua60f\ua66f-\ua67e\ua69f\ua6f0-\ua6f7\ua700-\ua716\ua720-\ua721\ua789-\ua78a' ||
            '\ua802\ua806\ua80b\ua823-\ua82b\ua836-\ua839\ua874-\ua877\ua880-\ua881\ua8b4-\ua8c4' ||
            '\ua8ce-\ua8cf\ua8e0-\ua8f1\ua8f8-\ua8fa\ua926-\ua92f\ua947-\ua953\ua95f\ua980-\ua983' ||
            '\ua9b3-\ua9cd\ua9de-\ua9df\uaa29-\uaa36\uaa43\uaa4c-\uaa4d\uaa5c-\uaa5f\uaa77-\uaa79' ||
            '\uaa7b\uaab0\uaab2-\uaab4\uaab7-\uaab8\uaabe-\uaabf\uaac1\uaade-\uaadf\uaaeb-\uaaf1' ||
            '\uaaf5-\uaaf6\uabe3-\uabed\ufb1e\ufb29\ufbb2-\ufbc1\ufd3e-\ufd3f\ufdfc-\ufdfd' ||
            '\ufe00-\ufe19\ufe20-\ufe26\ufe30-\ufe52\ufe54-\ufe66\ufe68-\ufe6b\ufeff\uff01-\uff0f' ||
            '\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65\uffe0-\uffe6\uffe8-\uffee\ufff9-\uffff' ||
            '\U00010100-\U00010102\U00010137-\U0001013f\U00010179-\U00010189\U00010190-\U0001019b' ||
            '\U000101d0-\U000101fd\U0001039f\U000103d0\U00010857\U0001091f\U0001093f' ||
            '\U00010a01-\U00010a03\U00010a05-\U00010a06\U00010a0c-\U00010a0f\U00010a38-\U00010a3a' ||
            '\U00010a3f\U00010a50-\U00010a58\U00010a7f\U00010b39-\U00010b3f\U00011000-\U00011002' ||
            '\U00011038-\U0001104d\U00011080-\U00011082\U000110b0-\U000110c1\U00011100-\U00011102' ||
            '\U00011127-\U00011134\U00011140-\U00011143\U00011180-\U00011182\U000111b3-\U000111c0' ||
            '\U000111c5-\U000111c8\U000116ab-\U000116b7\U00012470-\U00012473\U00016f51-\U00016f7e' ||
            '\U00016f8f-\U00016f92\U0001d000-\U0001d0f5\U0001d100-\U0001d126\U0001d129-\U0001d1dd' ||
            '\U0001d200-\U0001d245\U0001d300-\U0001d356\U0001d6c1\U0001d6db\U0001d6fb\U0001d715' ||
            '\U0001d735\U0001d74f\U0001d76f\U0001d789\U0001d7a9\U0001d7c3\U0001eef0-\U0001eef1' ||
            '\U0001f000-\U0001f02b\U0001f030-\U0001f093\U0001f0a0-\U0001f0ae\U0001f0b1-\U0001f0be' ||
            '\U0001f0c1-\U0001f0cf\U0001f0d1-\U0001f0df\U0001f110-\U0001f12e\U0001f130-\U0001f16b' ||
            '\U0001f170-\U0001f19a\U0001f1e6-\U0001f202\U0001f210-\U0001f23a\U0001f240-\U0001f248' ||
            '\U0001f250-\U0001f251\U0001f300-\U0001f320\U0001f330-\U0001f335\U0001f337-\U0001f37c' ||
            '\U0001f380-\U0001f393\U0001f3a0-\U0001f3c4\U0001f3c6-\U0001f3ca\U0001f3e0-\U0001f3f0' ||
            '\U0001f400-\U0001f43e\U0001f440\U0001f442-\U0001f4f7\U0001f4f9-\U0001f4fc' ||
            '\U0001f500-\U0001f53d\U0001f540-\U0001f543\U0001f550-\U0001f567\U0001f5fb-\U0001f640' ||
            '\U0001f645-\U0001f64f\U0001f680-\U0001f6c5\U0001f700-\U0001f773\U000e0001' ||
            '\U000e0020-\U000e007f\U000e0100-\U000e01ef' ||
            ']+'
        ) WITH ORDINALITY AS w(word, n)
        WHERE word <> '' AND octet_length(word) < 2048
    );
END
$$;

CREATE FUNCTION ledger_tsquery(phrases text[], prefixes boolean[], any_term boolean)
    RETURNS tsquery LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
    AS $$
DECLARE
    terms text[] := '{}';
    term text;
    last smallint;
    w record;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(phrases), 0) LOOP
        term := NULL;
        FOR w IN
            SELECT v.lexeme, p.pos
            FROM unnest(ledger_tsv(phrases[i])) AS v, unnest(v.positions) AS p(pos)
            ORDER BY p.pos
        LOOP
            term := coalesce(term || ' <' || (w.pos - last) || '> ', '') || '''' || w.lexeme || '''';
            last := w.pos;
        END LOOP;
        IF term IS NOT NULL THEN
            terms := terms || ('(' || term || CASE WHEN prefixes[i] THEN ':*' ELSE '' END || ')');
        END IF;
    END LOOP;
    RETURN nullif(array_to_string(terms, CASE WHEN any_term THEN ' | ' ELSE ' & ' END), '')::tsquery;
END
$$;

DROP INDEX messages_fts;
ALTER TABLE messages ADD COLUMN words tsvector GENERATED ALWAYS AS (ledger_tsv(content)) STORED;
CREATE INDEX messages_fts ON messages USING gin (words);
