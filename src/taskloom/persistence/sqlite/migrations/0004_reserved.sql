-- taskloom schema 4: reserved for the child-workflows migration of another branch.
-- DELETE THIS FILE when that branch's 0004 is merged (the numbers must have no gaps).
SELECT 1;
