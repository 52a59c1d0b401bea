-- Reserved for the timers migration of branch wt-timers (the timers table),
-- which replaces this file when the branches merge: 0008 needs an unbroken
-- numbering to apply. Nothing here.
SELECT 1;
