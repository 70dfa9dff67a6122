"""`bertkit demo`: BERT's story on BBC News, offline, on a laptop CPU, in one time budget.

1. `corpus`: split the 2,225 BBC News articles (five topics) into training and held-out articles;
2. `pretraining`: learn a WordPiece vocabulary from the training articles, pack it into
   full-length sequences, pretrain a small BERT with the budget recipe (MLM, no dropout, width-scaled
   init, lr to zero at the deadline) for what the budget leaves, show fill-mask guesses;
3. `senses`: static vs contextual vectors of "court" and "bank" (Word2Vec, a random model of the
   demo's shape as the floor, the demo's model, all-MiniLM-L6-v2);
4. `labels`: pretrained vs not, a frozen-feature probe at a few label budgets;
5. `summary`: the last screen, summary.md (figures embedded) and summary.json (every number).
`plan` holds the sizes, stage budgets and thread choice; `run` runs the stages in order;
`figures` draws the heat maps of `senses` and the learning curve of `labels`.
Every stage calls the library functions of the matching `bertkit` command.
"""

from bertkit.demo.plan import DemoPlan
from bertkit.demo.run import run_demo

__all__ = ["DemoPlan", "run_demo"]
