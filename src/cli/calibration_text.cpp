// The calibration text `vtllm quantize` runs when no --calibration-file is given: plain
// English prose of several kinds (narrative, news, description, argument, dialogue,
// instructions, figures), written for vtllm, so that no test text is also calibration text.
#include "cli/calibration_text.h"

namespace vtllm::cli {

const char* BuiltinCalibrationText() {
  return R"TEXT(The morning train from the valley was late again, and the people waiting on the platform had given up looking down the track. An old man in a gray coat sat on the bench with a paper folded on his knee. He had read the same column three times. Two boys were throwing pebbles at a tin sign that said the station would be closed for repairs in the spring, although nobody could remember which spring that had been. When the whistle finally sounded behind the hill, a woman with a basket of eggs stood up too quickly and had to steady herself against the post.

"You would think they could tell us something," she said to no one in particular.

"They never tell anybody anything," the old man answered. "That is the one thing you can count on."

The city council voted on Tuesday night to spend four hundred thousand dollars on new water mains for the east side, after a debate that lasted nearly three hours. Members who opposed the measure argued that the money should come from a bond issue rather than from the general fund, which they said was already stretched by the cost of the new school. The mayor, who supported the plan, said the old pipes had broken eleven times since January and that the repairs alone had cost the city more than sixty thousand dollars. The measure passed by a vote of seven to four. Work is expected to begin in May and to be finished before the end of the year.

In the laboratory the samples were kept at a constant temperature of twenty degrees, and each one was weighed twice, once before and once after it had been dried. The difference between the two weights gave the amount of water the sample had held. Of the forty samples taken from the northern field, thirty-one lost more than a tenth of their weight; of those taken from the southern field, only nine did. The result suggested that the soil in the north held water far better than the soil in the south, which agreed with what the farmers had said for years but had never been measured with any care.

It is often said that a man's character is shown less by what he does in a crisis than by what he does on an ordinary afternoon when nobody is watching. There is some truth in this, but it can be carried too far. A crisis strips away the habits and excuses of daily life and leaves a person with nothing but his choices. What he chooses then may surprise him as much as anyone else. The quiet afternoon, on the other hand, shows what he has made of himself over many years, and that is a different thing, neither better nor worse as evidence, but slower to read.

She opened the letter at the kitchen table while the coffee was still too hot to drink. It was from her brother, who wrote seldom and always in pencil. He said the winter had been hard on the cattle but that they had lost only two calves, and that the new barn roof had held through the worst of the storms. He asked whether she meant to come home for the summer. At the bottom, in smaller letters, he had written that their mother was not as strong as she pretended to be, and that it would be a good thing if she came.

To prepare the wall, first scrape away any loose paint with a wide blade and wash the surface with warm water and a little soap. Let it dry overnight. Fill the cracks with a thin layer of plaster, smoothing it with a damp cloth, and sand the patches lightly when they have set. Apply one coat of primer and allow at least four hours before the first coat of paint. Two coats are usually enough; on a dark wall a third may be needed. Clean the brushes in water at once, before the paint begins to harden.

The committee met in a small room on the second floor of the library. There were seven of them around a table meant for six, and the chairman, a tall man with a careful voice, began by reading the minutes of the last meeting. Mr. Harris objected to the way his remarks on the budget had been recorded. The secretary said she had written down exactly what he said. Mr. Harris said that was precisely the trouble. After some discussion the minutes were approved with one correction, and the committee turned to the question of the new reading room, which had been postponed twice already.

By the middle of the century the town had grown from a crossroads with a store and a church into a place of nearly twelve thousand people. The mill brought most of them. It ran two shifts and sometimes three, and the sound of it could be heard across the river on a still night. When the mill closed, the town did not die, as many had predicted, but it changed. The young people left for the cities, the stores on Main Street were taken over by offices and shops that sold things nobody had needed before, and the church built a new hall for the meetings of the clubs that seemed to multiply every year.

"Where did you put the map?" he asked.

"It is in the glove box, where it always is."

"It is not in the glove box. I have looked."

"Then you did not look under the flashlight." She did not turn her head. The road ran straight ahead between the fields, and the sun was going down behind a line of trees on the left. After a while he found the map, unfolded it across his knees, and studied it for a long time without saying anything. Then he folded it again, badly, and put it back.

The price of wheat rose by six cents a bushel during the week, the largest gain since early spring, as reports of dry weather in the western states raised fears of a smaller harvest. Corn and oats followed, though more slowly. Traders said that a good rain in the next ten days could undo most of the rise. Cattle prices were steady, and hogs were slightly lower on heavy receipts at the principal markets. Cotton closed at thirty-three cents a pound, unchanged from the week before.

A good teacher does not pour knowledge into a student as water is poured into a jar. He arranges things so that the student wants to know, and then he gets out of the way. This is harder than it sounds. It requires patience, and it requires a willingness to watch someone struggle with a problem that could be solved for him in a minute. Most of us are not patient enough. We give the answer because we cannot bear the silence, and the student learns only that answers come from somewhere outside himself.

The house stood at the end of a long lane lined with maples, and in October the leaves made a yellow tunnel that the children ran through on their way to the school bus. There were four bedrooms upstairs and a porch that went around three sides. The kitchen was the warmest room in winter because of the big iron stove, and it was there that the family ate, argued, did homework, and listened to the radio in the evenings, with the dog asleep under the table and the cat watching from the top of the cupboard.

In nineteen fifty-eight the state built a new highway along the coast, and within five years the number of visitors to the beaches had tripled. Motels went up where there had been dunes and grass. The fishermen complained that the traffic kept them awake and that the summer people drove up the price of everything from bread to boat repairs. But the fishermen's sons found work at the motels and the gas stations, and some of them did better than their fathers ever had. By the end of the decade the argument was mostly over, and the town had decided, without ever quite voting on it, what it was going to be.
)TEXT";
}

}  // namespace vtllm::cli
